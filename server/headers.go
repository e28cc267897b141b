package server

// Response header keys the service spells in mixed case, here in Go's
// canonical form: http.Header.Set canonicalizes every key it is given,
// and for a key not already canonical that costs an allocation on each of
// a busy server's responses. Clients read header names case-insensitively.
const (
	hdrETag               = "Etag"               // ETag
	hdrDataServiceVersion = "Dataserviceversion" // DataServiceVersion
	hdrDataServiceID      = "Dataserviceid"      // DataServiceId
)
