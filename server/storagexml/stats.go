package storagexml

import (
	"bytes"
	"net/http"
	"time"
)

// Geo-replication states of the secondary (get-table-service-stats).
const (
	GeoLive        = "live"        // replication is working
	GeoBootstrap   = "bootstrap"   // initial synchronization in progress
	GeoUnavailable = "unavailable" // the secondary is not reachable
)

// GeoReplication is the body of Get Table Service Stats.
type GeoReplication struct {
	Status       string
	LastSyncTime time.Time // zero: unknown, written as an empty element
}

// MarshalServiceStats writes the Get Table Service Stats body; the sync
// time is an RFC 1123 date, as the service writes it:
//
//	<?xml version="1.0" encoding="utf-8"?><StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>Wed, 08 Sep 2021 16:46:37 GMT</LastSyncTime></GeoReplication></StorageServiceStats>
func MarshalServiceStats(g GeoReplication) []byte {
	var b bytes.Buffer
	b.WriteString(xmlDeclaration)
	b.WriteString("<StorageServiceStats><GeoReplication>")
	elem(&b, "Status", g.Status)
	sync := ""
	if !g.LastSyncTime.IsZero() {
		sync = g.LastSyncTime.UTC().Format(http.TimeFormat)
	}
	elem(&b, "LastSyncTime", sync)
	b.WriteString("</GeoReplication></StorageServiceStats>")
	return b.Bytes()
}
