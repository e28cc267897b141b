package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server/auth"
)

// getEntity answers a point query, GET /t(PartitionKey='p',RowKey='r').
func (s *Server) getEntity(rq *request) error {
	m, err := rq.metadata()
	if err != nil {
		return err
	}
	sel, err := selection(rq)
	if err != nil {
		return err
	}
	t := rq.target
	if err := rq.principal.CheckKey(t.PartitionKey, t.RowKey); err != nil {
		return err
	}
	e, err := s.store.GetEntity(rq.ctx, rq.account, t.Table, t.PartitionKey, t.RowKey)
	if err != nil {
		return err
	}
	etag := e.ETag()
	body, err := rq.encoder(m, sel).AppendEntityResponse(nil, []byte(e.PartitionKey), []byte(e.RowKey), etag, e.Value)
	if err != nil {
		return err
	}
	rq.setHeader(hdrETag, etag)
	rq.setHeader(hdrDataServiceVersion, "3.0;")
	rq.reply(http.StatusOK, jsonContentType(m), body)
	return nil
}

// insertEntity answers POST /t with the entity in the body: 201 with the
// entity, or 204 when the client prefers no content.
func (s *Server) insertEntity(rq *request) error {
	m, err := rq.metadata()
	if err != nil {
		return err
	}
	if err := rejectIfNoneMatch(rq.r.Header); err != nil {
		return err
	}
	d, err := rq.readEntity()
	if err != nil {
		return err
	}
	if !d.HasPartitionKey || !d.HasRowKey {
		return &odata.Error{Code: odata.CodePropertiesNeedValue, Message: msgPropertiesNeedValueForInsert, Pos: -1}
	}
	if err := rq.principal.CheckKey(d.PartitionKey, d.RowKey); err != nil {
		return err
	}
	e, err := s.store.Apply(rq.ctx, rq.account, rq.target.Table, partition.Op{Kind: partition.OpInsert, Entity: &d.Entity})
	if err != nil {
		return err
	}
	etag := e.ETag()
	rq.setHeader(hdrETag, etag)
	return rq.replyCreated(entityURL(rq.baseURL(), rq.target.Table, e.PartitionKey, e.RowKey), m, func() ([]byte, error) {
		return rq.encoder(m, nil).AppendEntityResponse(nil, []byte(e.PartitionKey), []byte(e.RowKey), etag, e.Value)
	})
}

// readEntity reads and decodes an entity body.
func (rq *request) readEntity() (odata.DecodedEntity, error) {
	body, err := rq.readBody()
	if err != nil {
		return odata.DecodedEntity{}, err
	}
	return odata.DecodeEntityJSON(body)
}

// writeEntity answers PUT, MERGE and PATCH on an entity: rq.writeKind is
// the update or merge when the request has If-Match, else the upsert. The
// keys are the URL's; keys in the body are ignored.
func (s *Server) writeEntity(rq *request) error {
	ifMatch, err := ifMatch(rq.r.Header)
	if err != nil {
		return err
	}
	d, err := rq.readEntity()
	if err != nil {
		return err
	}
	t := rq.target
	if err := rq.principal.CheckKey(t.PartitionKey, t.RowKey); err != nil {
		return err
	}
	d.PartitionKey, d.RowKey = t.PartitionKey, t.RowKey
	e, err := s.store.Apply(rq.ctx, rq.account, t.Table, partition.Op{Kind: rq.writeKind, Entity: &d.Entity, IfMatch: ifMatch})
	if err != nil {
		return err
	}
	rq.setHeader(hdrETag, e.ETag())
	rq.setHeader(hdrDataServiceVersion, "1.0;")
	rq.reply(http.StatusNoContent, "", nil)
	return nil
}

// deleteEntity answers DELETE /t(PartitionKey='p',RowKey='r'), which
// needs If-Match.
func (s *Server) deleteEntity(rq *request) error {
	ifMatch, err := ifMatch(rq.r.Header)
	if err != nil {
		return err
	}
	if ifMatch == "" {
		return errMissingIfMatch
	}
	t := rq.target
	if err := rq.principal.CheckKey(t.PartitionKey, t.RowKey); err != nil {
		return err
	}
	op := partition.Op{Kind: partition.OpDelete, Entity: &odata.Entity{PartitionKey: t.PartitionKey, RowKey: t.RowKey}, IfMatch: ifMatch}
	if _, err := s.store.Apply(rq.ctx, rq.account, t.Table, op); err != nil {
		return err
	}
	rq.setHeader(hdrDataServiceVersion, "1.0;")
	rq.reply(http.StatusNoContent, "", nil)
	return nil
}

// entityWrite maps a write on an entity URL, by its method (after
// X-HTTP-Method) and whether it carries If-Match, to the store's operation
// and the one authorization checks: PUT replaces, MERGE and PATCH merge,
// each conditional with If-Match and an upsert without; DELETE deletes.
func entityWrite(method string, conditional bool) (partition.OpKind, auth.Operation, bool) {
	switch {
	case method == http.MethodPut && conditional:
		return partition.OpUpdate, auth.OpUpdateEntity, true
	case method == http.MethodPut:
		return partition.OpInsertOrReplace, auth.OpInsertOrReplaceEntity, true
	case (method == "MERGE" || method == http.MethodPatch) && conditional:
		return partition.OpMerge, auth.OpMergeEntity, true
	case method == "MERGE" || method == http.MethodPatch:
		return partition.OpInsertOrMerge, auth.OpInsertOrMergeEntity, true
	case method == http.MethodDelete:
		return partition.OpDelete, auth.OpDeleteEntity, true
	}
	return 0, 0, false
}

// ifMatch returns the If-Match condition of an entity write: "" (none),
// "*" or an ETag. If-None-Match has no meaning for the service's writes
// and is refused, as is a value that is not an ETag at all.
func ifMatch(h http.Header) (string, error) {
	if err := rejectIfNoneMatch(h); err != nil {
		return "", err
	}
	values := h.Values("If-Match")
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", invalidInput(fmt.Sprintf(msgInvalidEtag, quoteForMessage(strings.Join(values, ", "))))
	}
	v := strings.TrimSpace(values[0])
	if v == "*" || isETag(v) {
		return v, nil
	}
	return "", invalidInput(fmt.Sprintf(msgInvalidEtag, quoteForMessage(v)))
}

func rejectIfNoneMatch(h http.Header) error {
	if h.Get("If-None-Match") != "" {
		return invalidInput(msgIfNoneMatchNotSupported)
	}
	return nil
}

// isETag reports whether v has the form of an entity tag, weak (W/"…") or
// strong ("…"). A well-formed tag that is not the entity's is a failed
// condition (412), not a bad request.
func isETag(v string) bool {
	v = strings.TrimPrefix(v, "W/")
	return len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && !strings.Contains(v[1:len(v)-1], `"`)
}

// selection parses the request's $select.
func selection(rq *request) (*odata.Selection, error) {
	s, ok := rq.query["$select"]
	if !ok || s[0] == "" {
		return nil, nil
	}
	return odata.ParseSelect(s[0])
}

// entityURL is an entity's address, as Location and DataServiceId give it.
func entityURL(base, table, pk, rk string) string {
	return base + table + "(PartitionKey='" + escapeKey(pk) + "',RowKey='" + escapeKey(rk) + "')"
}

// escapeKey writes a key value for a URL: quotes doubled, then
// percent-encoded as a path segment, the quotes kept as they are.
func escapeKey(k string) string {
	return strings.ReplaceAll(url.PathEscape(strings.ReplaceAll(k, "'", "''")), "%27", "'")
}
