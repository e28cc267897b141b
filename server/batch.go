package server

import (
	"bytes"
	"errors"
	"net/http"
	"strings"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/server/batch"
)

// batchOp is one parsed change set operation, ready for the store, with
// what its response needs.
type batchOp struct {
	op       partition.Op
	meta     odata.Metadata
	pref     string // the operation's Prefer
	isInsert bool
}

// batch answers POST /$batch: an entity group transaction, or a lone point
// query. The response is 202 Accepted with a multipart body holding every
// operation's response, or — if an operation fails, in which case nothing
// is applied — that operation's failure alone.
func (s *Server) batch(rq *request) error {
	// Parse enforces the size limit itself (413), reading at most one byte
	// past it.
	req, err := batch.Parse(rq.r.Header.Get("Content-Type"), &rq.body, batch.Limits{MaxBodyBytes: s.opts.MaxBodyBytes})
	var be *batch.Error
	switch {
	case errors.As(err, &be) && be.Index >= 0:
		return s.replyBatchFailure(rq, batch.NewResponseWriter(), be.Index, "", be)
	case err != nil:
		return err
	}
	w := batch.NewResponseWriter()
	if req.IsQuery() {
		return s.batchQuery(rq, w, req.Operations[0])
	}
	if len(req.Operations) == 0 {
		return s.replyBatch(rq, w, nil)
	}

	var table string
	ops := make([]batchOp, len(req.Operations))
	storeOps := make([]partition.Op, len(req.Operations))
	for i, o := range req.Operations {
		bo, opTable, err := s.parseBatchOp(rq, o)
		if err == nil && i > 0 && !strings.EqualFold(opTable, table) {
			err = &odata.Error{Code: partition.CodeCommandsInBatchActOnDifferentPartitions,
				Message: "All commands in a batch must operate on same entity group.", Pos: -1}
		}
		if err != nil {
			return s.replyBatchFailure(rq, w, i, o.ContentID, err)
		}
		table = opTable
		ops[i], storeOps[i] = bo, bo.op
	}

	results, err := s.store.ExecuteBatch(rq.ctx, rq.account, table, storeOps)
	var fail *partition.BatchError
	switch {
	case errors.As(err, &fail):
		id := ""
		if fail.Index < len(req.Operations) {
			id = req.Operations[fail.Index].ContentID
		}
		return s.replyBatchFailure(rq, w, fail.Index, id, fail.Err)
	case err != nil:
		return err
	}

	base := rq.baseURL()
	parts := make([]batch.SubResponse, len(results))
	for i, res := range results {
		bo, o := &ops[i], req.Operations[i]
		p := batch.SubResponse{Status: http.StatusNoContent, ContentID: o.ContentID, DataServiceVersion: "1.0;"}
		if bo.op.Kind != partition.OpDelete {
			p.ETag = res.ETag()
		}
		if bo.isInsert {
			p.Location = entityURL(base, table, res.PartitionKey, res.RowKey)
			p.DataServiceID = p.Location
			p.DataServiceVersion = "3.0;"
			p.PreferenceApplied = bo.pref
			if bo.pref != "return-no-content" {
				enc := odata.NewEncoder(odata.EncodeOptions{Metadata: bo.meta, BaseURL: base, Account: rq.account, Table: table})
				out, err := enc.AppendEntityResponse(nil, []byte(res.PartitionKey), []byte(res.RowKey), p.ETag, res.Value)
				if err != nil {
					return err
				}
				p.Status, p.ContentType, p.Body = http.StatusCreated, jsonContentType(bo.meta), out
			}
		}
		parts[i] = p
	}
	return s.replyBatch(rq, w, parts)
}

// parseBatchOp reads one change set operation: what it addresses, which
// write it is, whether the caller may do it, and its entity.
func (s *Server) parseBatchOp(rq *request, o *batch.Operation) (batchOp, string, error) {
	t, err := o.Target(rq.pathAccount())
	if err != nil {
		return batchOp{}, "", err
	}
	method, err := batch.EffectiveMethod(o.Method, o.Header)
	if err != nil {
		return batchOp{}, "", err
	}
	cond, err := ifMatch(o.Header)
	if err != nil {
		return batchOp{}, "", err
	}
	var (
		kind   partition.OpKind
		authOp auth.Operation
		ok     bool
	)
	switch t.Kind {
	case batch.TargetEntitySet:
		kind, authOp, ok = partition.OpInsert, auth.OpInsertEntity, method == http.MethodPost
	case batch.TargetEntity:
		kind, authOp, ok = entityWrite(method, cond != "")
	}
	switch {
	case !ok:
		return batchOp{}, "", invalidInput("A change set operation must be an entity insert, update, merge or delete; got " +
			quoteForMessage(method) + " on " + t.Kind.String() + ".")
	case kind == partition.OpDelete && cond == "":
		return batchOp{}, "", errMissingIfMatch
	}
	if err := rq.principal.CanDo(authOp, t.Table); err != nil {
		return batchOp{}, "", err
	}

	var e odata.Entity
	if kind == partition.OpDelete {
		e.PartitionKey, e.RowKey = t.PartitionKey, t.RowKey
	} else {
		d, err := odata.DecodeEntityJSON(o.Body)
		if err != nil {
			return batchOp{}, "", err
		}
		if kind == partition.OpInsert && (!d.HasPartitionKey || !d.HasRowKey) {
			return batchOp{}, "", &odata.Error{Code: odata.CodePropertiesNeedValue, Message: msgPropertiesNeedValueForInsert, Pos: -1}
		}
		if kind != partition.OpInsert {
			d.PartitionKey, d.RowKey = t.PartitionKey, t.RowKey
		}
		e = d.Entity
	}
	if err := rq.principal.CheckKey(e.PartitionKey, e.RowKey); err != nil {
		return batchOp{}, "", err
	}
	bo := batchOp{op: partition.Op{Kind: kind, Entity: &e, IfMatch: cond}, isInsert: kind == partition.OpInsert}
	if bo.isInsert {
		bo.pref = preferenceOf(o.Header)
		if bo.meta, err = metadataOf(o.Header, nil); err != nil {
			return batchOp{}, "", err
		}
	}
	return bo, t.Table, nil
}

// batchQuery answers a batch holding one point query.
func (s *Server) batchQuery(rq *request, w *batch.ResponseWriter, o *batch.Operation) error {
	t, err := o.Target(rq.pathAccount())
	if err == nil && t.Kind != batch.TargetEntity {
		err = invalidInput("A query in a batch must be a point query of one entity.")
	}
	var m odata.Metadata
	if err == nil {
		m, err = metadataOf(o.Header, o.URL.Query())
	}
	if err == nil {
		err = rq.principal.CanDo(auth.OpGetEntity, t.Table)
	}
	if err == nil {
		err = rq.principal.CheckKey(t.PartitionKey, t.RowKey)
	}
	var e partition.StoredEntity
	if err == nil {
		e, err = s.store.GetEntity(rq.ctx, rq.account, t.Table, t.PartitionKey, t.RowKey)
	}
	var out []byte
	var etag string
	if err == nil {
		etag = e.ETag()
		enc := odata.NewEncoder(odata.EncodeOptions{Metadata: m, BaseURL: rq.baseURL(), Account: rq.account, Table: t.Table})
		out, err = enc.AppendEntityResponse(nil, []byte(e.PartitionKey), []byte(e.RowKey), etag, e.Value)
	}
	var part batch.SubResponse
	if err != nil {
		status, code, message, ok := describe(err)
		if !ok {
			return err
		}
		part = batch.FailureResponse(-1, o.ContentID, status, code, message, rq.id, rq.now)
	} else {
		part = batch.SubResponse{Status: http.StatusOK, ContentID: o.ContentID, DataServiceVersion: "3.0;",
			ContentType: jsonContentType(m), ETag: etag, Body: out}
	}
	var buf bytes.Buffer
	if err := w.WriteQuery(&buf, part); err != nil {
		return err
	}
	rq.reply(http.StatusAccepted, w.ContentType(), buf.Bytes())
	return nil
}

// replyBatchFailure answers a change set whose operation at index failed:
// 202 with that failure alone. Internal errors are not the client's:
// they fail the whole request.
func (s *Server) replyBatchFailure(rq *request, w *batch.ResponseWriter, index int, contentID string, err error) error {
	status, code, message, ok := describe(err)
	if !ok {
		return err
	}
	// The service names the failure on the 202 too; the Go SDK reads the
	// code of a failed transaction from there.
	rq.setErrorCode(code)
	return s.replyBatch(rq, w, []batch.SubResponse{batch.FailureResponse(index, contentID, status, code, message, rq.id, rq.now)})
}

func (s *Server) replyBatch(rq *request, w *batch.ResponseWriter, parts []batch.SubResponse) error {
	var buf bytes.Buffer
	if err := w.WriteChangeset(&buf, parts); err != nil {
		return err
	}
	rq.setHeader(hdrDataServiceVersion, "3.0;")
	rq.reply(http.StatusAccepted, w.ContentType(), buf.Bytes())
	return nil
}
