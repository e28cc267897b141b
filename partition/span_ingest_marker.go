package partition

import (
	"encoding/binary"
	"fmt"

	"github.com/tabuladb/tabula/lsm"
)

// The marker of a span ingest under way (keys.md, "Span ingests"): what
// Open needs to finish the move of a span whose stream has checked out.

// spanMarkerVersion is the version byte of a span-ingest marker's value;
// spanMarkerMergedVersion's also lists the groups the span merged.
const (
	spanMarkerVersion       = 1
	spanMarkerMergedVersion = 2
)

// spanIngest is what the marker of a span ingest records: enough for Open
// to finish the move without the stream.
type spanIngest struct {
	group, applied uint64
	tableID        uint64
	account        string
	low, high      string
	merged         []uint64 // the groups the stream's span merged
}

// Marker value: version | u64be(table id) | u64be(applied index) |
// uvarint-prefixed account, low and high PartitionKeys | (version 2,
// written only when the span merged a group) the merged groups as a span
// record lists them.
func (m *spanIngest) encode() []byte {
	version := byte(spanMarkerVersion)
	if len(m.merged) > 0 {
		version = spanMarkerMergedVersion
	}
	v := []byte{version}
	v = binary.BigEndian.AppendUint64(v, m.tableID)
	v = binary.BigEndian.AppendUint64(v, m.applied)
	for _, s := range []string{m.account, m.low, m.high} {
		v = appendSpanString(v, s)
	}
	if version == spanMarkerMergedVersion {
		v = appendGroupIDs(v, m.merged)
	}
	return v
}

func decodeSpanIngest(group uint64, v []byte) (spanIngest, error) {
	m := spanIngest{group: group}
	bad := fmt.Errorf("partition: span ingest marker of group %d: %w", group, lsm.ErrCorruption)
	if len(v) < 17 || v[0] != spanMarkerVersion && v[0] != spanMarkerMergedVersion {
		return m, bad
	}
	version := v[0]
	m.tableID = binary.BigEndian.Uint64(v[1:])
	m.applied = binary.BigEndian.Uint64(v[9:])
	v = v[17:]
	for _, dst := range []*string{&m.account, &m.low, &m.high} {
		n, k := binary.Uvarint(v)
		if k <= 0 || n > uint64(len(v)-k) {
			return m, bad
		}
		*dst = string(v[k : k+int(n)])
		v = v[k+int(n):]
	}
	if version == spanMarkerMergedVersion {
		var err error
		if m.merged, v, err = readGroupIDsFrom(v); err != nil {
			return m, bad
		}
	}
	if len(v) != 0 {
		return m, bad
	}
	return m, nil
}
