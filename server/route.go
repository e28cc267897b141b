package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/server/batch"
)

// handler answers one kind of request once it is routed and authorized.
// It writes the success response itself and returns the failure, if any.
// Handlers are method expressions ((*Server).getEntity), not method
// values, so picking one allocates nothing.
type handler func(s *Server, rq *request) error

// route finds what the request addresses and which operation it is,
// authenticates and authorizes it, and runs the operation's handler.
func (s *Server) route(rq *request) {
	if err := s.prepare(rq); err != nil {
		rq.fail(err)
		return
	}
	if rq.r.Method == http.MethodOptions {
		rq.op = "Preflight"
		rq.xmlErrors = true
		if err := s.preflight(rq); err != nil {
			rq.fail(err)
		}
		return
	}
	method, err := batch.EffectiveMethod(rq.r.Method, rq.r.Header)
	if err != nil {
		rq.fail(err)
		return
	}
	h, op, err := s.pick(rq, method)
	if err == nil {
		rq.op = op.String()
		err = rq.checkVersion()
	}
	if err == nil {
		err = s.authorize(rq, op)
	}
	if err == nil {
		err = h(s, rq)
	}
	if err != nil {
		rq.fail(resourceNotFound(rq.target.Kind, err))
	}
}

// resourceNotFound answers as the service does for a missing table: a
// request that names one resource in its URL, a table as Tables('name') or
// an entity by its keys, finds that resource missing (404
// ResourceNotFound); requests on a table's entity set (queries, inserts,
// ACLs, batches) find the table missing (404 TableNotFound).
func resourceNotFound(kind batch.TargetKind, err error) error {
	if (kind == batch.TargetTable || kind == batch.TargetEntity) && partition.IsCode(err, partition.CodeTableNotFound) {
		return &apiError{status: http.StatusNotFound, code: codeResourceNotFound, message: msgResourceNotFound}
	}
	return err
}

// prepare reads the account, the target and the query string.
func (s *Server) prepare(rq *request) error {
	rq.path = rq.r.URL.EscapedPath()
	if raw := rq.r.URL.RawQuery; raw != "" { // most requests have none: no map for them
		q, err := url.ParseQuery(raw)
		if err != nil {
			return invalidQueryParameter("The query string is not correctly encoded.")
		}
		rq.query = q
	}
	var err error
	rq.account, rq.hostStyle, rq.target, err = s.parseTarget(rq.accounts, rq.r.Host, rq.path)
	return err
}

// parseTarget reads the account a request is for, from its Host
// (production-style URLs) or from the first segment of its path, and
// what the path addresses.
func (s *Server) parseTarget(accounts *auth.Accounts, host, path string) (account string, hostStyle bool, t batch.Target, err error) {
	pathAccount := "" // the account the path starts with, path-style
	account, secondary, hostStyle := s.hostAccount(accounts, host)
	if !hostStyle {
		first, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
		account = strings.TrimSuffix(first, "-secondary")
		pathAccount = account
	}
	if t, err = batch.ParseTarget(path, pathAccount); err != nil {
		return account, hostStyle, t, err
	}
	t.Secondary = t.Secondary || secondary
	return account, hostStyle, t, nil
}

// RequestTable names the account and the table whose entities a request
// reads or writes, as the server routes it, without reading its body or
// checking its signature: "" for a request that addresses no table's
// entities (tables, service properties, a table's ACL). For a $batch the
// table is named by the body, whose start is read (and put back) to find
// it. A cluster node forwards the request to the node that answers for
// that table's entities.
func (s *Server) RequestTable(r *http.Request) (account, table string) {
	account, hostStyle, t, err := s.parseTarget(s.accounts.Load(), r.Host, r.URL.EscapedPath())
	if err != nil {
		return account, ""
	}
	switch t.Kind {
	case batch.TargetEntity, batch.TargetEntitySet:
		if strings.Contains(r.URL.RawQuery, "comp=") { // ?comp=acl: the table's, not its entities'
			return account, ""
		}
		return account, t.Table
	case batch.TargetBatch:
		pathAccount := account
		if hostStyle {
			pathAccount = ""
		}
		return account, batch.FirstTable(peekBody(r, batchPeekBytes), pathAccount)
	}
	return account, ""
}

// RequestPartitionKey names the PartitionKey of the first entity a REST
// request of a table's entities addresses, for a cluster node to route a
// request of a table split into ranges: the key in the URL of a point
// operation; where a query's page starts (its continuation, else its
// $filter's lowest key: partition.QueryStart); an insert's, from its
// body; a $batch's first operation's, from its URL or body. The body is
// read (and put back) as far as it takes, up to MaxBodyBytes. ok is false
// when the request names no key this way (the request's own handling
// refuses one that does not parse).
func (s *Server) RequestPartitionKey(r *http.Request) (pk string, ok bool) {
	account, hostStyle, t, err := s.parseTarget(s.accounts.Load(), r.Host, r.URL.EscapedPath())
	if err != nil {
		return "", false
	}
	switch t.Kind {
	case batch.TargetEntity:
		return t.PartitionKey, true
	case batch.TargetEntitySet:
		if r.Method == http.MethodPost {
			return entityPartitionKey(peekBody(r, int(s.opts.MaxBodyBytes)))
		}
		q := r.URL.Query()
		pk, err := partition.QueryStart(partition.EntityQuery{Filter: q.Get("$filter"),
			NextPartitionKey: q.Get("NextPartitionKey"), NextRowKey: q.Get("NextRowKey")})
		return pk, err == nil
	case batch.TargetBatch:
		req, err := batch.Parse(r.Header.Get("Content-Type"), bytes.NewReader(peekBody(r, int(s.opts.MaxBodyBytes))),
			batch.Limits{MaxBodyBytes: s.opts.MaxBodyBytes})
		if err != nil || len(req.Operations) == 0 {
			return "", false
		}
		if hostStyle {
			account = ""
		}
		op := req.Operations[0]
		switch t, err := op.Target(account); {
		case err != nil:
			return "", false
		case t.Kind == batch.TargetEntity:
			return t.PartitionKey, true
		}
		return entityPartitionKey(op.Body)
	}
	return "", false
}

// entityPartitionKey reads the PartitionKey of an entity's JSON.
func entityPartitionKey(body []byte) (string, bool) {
	var e struct{ PartitionKey *string }
	if json.Unmarshal(body, &e) != nil || e.PartitionKey == nil {
		return "", false
	}
	return *e.PartitionKey, true
}

// batchPeekBytes is how much of a $batch body RequestTable reads to find
// its first operation's request line, which the SDKs put within the first
// few hundred bytes.
const batchPeekBytes = 4 << 10

// peekBody returns up to n bytes from the start of r's body and puts them
// back in front of the rest.
func peekBody(r *http.Request, n int) []byte {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	// As much as the body has, up to n: a small body costs a small buffer.
	buf, err := io.ReadAll(io.LimitReader(r.Body, int64(n)))
	rest := io.Reader(r.Body)
	if err != nil {
		rest = errReader{err}
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), rest), r.Body}
	return buf
}

// errReader fails every read with the error the body gave.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// hostAccount reads a production-style Host (devstoreaccount1.table.localhost,
// devstoreaccount1-secondary.example.com): its first label names the
// account when it is one of accounts, the request's set. An IP address, a
// single-label name, or a first label naming no account leaves the URL
// path-style.
func (s *Server) hostAccount(accounts *auth.Accounts, host string) (account string, secondary, ok bool) {
	if s.opts.PathStyleOnly {
		return "", false, false
	}
	label, _, dotted := strings.Cut(host, ".")
	if !dotted || label == "" {
		return "", false, false
	}
	label = strings.ToLower(label)
	account, secondary = strings.CutSuffix(label, "-secondary")
	if !accounts.Has(account) {
		return "", false, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if net.ParseIP(host) != nil { // an account may be all digits, like an address's first byte
		return "", false, false
	}
	return account, secondary, true
}

// pick chooses the handler and the operation (for authorization) of a
// request by what it addresses and its method (after X-HTTP-Method).
func (s *Server) pick(rq *request, method string) (handler, auth.Operation, error) {
	switch rq.target.Kind {
	case batch.TargetService:
		rq.xmlErrors = true
		if rq.query.Get("restype") != "service" {
			return nil, 0, invalidQueryParameter("restype must be 'service'.")
		}
		switch comp := rq.query.Get("comp"); {
		case comp == "properties" && method == http.MethodGet:
			return (*Server).getServiceProperties, auth.OpGetServiceProperties, nil
		case comp == "properties" && method == http.MethodPut:
			return (*Server).setServiceProperties, auth.OpSetServiceProperties, nil
		case comp == "stats" && method == http.MethodGet:
			return (*Server).getServiceStats, auth.OpGetServiceStats, nil
		case comp != "properties" && comp != "stats":
			return nil, 0, invalidQueryParameter("comp must be 'properties' or 'stats'.")
		}
	case batch.TargetTables:
		switch method {
		case http.MethodGet:
			return (*Server).queryTables, auth.OpQueryTables, nil
		case http.MethodPost:
			return (*Server).createTable, auth.OpCreateTable, nil
		}
		return nil, 0, &apiError{status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed,
			message: "The requested method is not allowed on the specified resource."}
	case batch.TargetTable:
		switch method {
		case http.MethodGet:
			return (*Server).getTable, auth.OpQueryTables, nil
		case http.MethodDelete:
			return (*Server).deleteTable, auth.OpDeleteTable, nil
		}
	case batch.TargetEntitySet:
		if comp, ok := rq.query["comp"]; ok {
			rq.xmlErrors = true
			if comp[0] != "acl" {
				return nil, 0, invalidQueryParameter("comp must be 'acl'.")
			}
			switch method {
			case http.MethodGet, http.MethodHead:
				return (*Server).getTableACL, auth.OpGetTableACL, nil
			case http.MethodPut:
				return (*Server).setTableACL, auth.OpSetTableACL, nil
			}
			break
		}
		switch method {
		case http.MethodGet:
			return (*Server).queryEntities, auth.OpQueryEntities, nil
		case http.MethodPost:
			return (*Server).insertEntity, auth.OpInsertEntity, nil
		}
	case batch.TargetEntity:
		if method == http.MethodGet {
			return (*Server).getEntity, auth.OpGetEntity, nil
		}
		kind, op, ok := entityWrite(method, rq.r.Header.Get("If-Match") != "")
		switch {
		case ok && kind == partition.OpDelete:
			return (*Server).deleteEntity, op, nil
		case ok:
			rq.writeKind = kind
			return (*Server).writeEntity, op, nil
		}
	case batch.TargetBatch:
		if method == http.MethodPost {
			return (*Server).batch, auth.OpBatch, nil
		}
	}
	return nil, 0, unsupportedVerb()
}

// authorize authenticates the request and checks that its principal may
// perform op on the table it addresses.
func (s *Server) authorize(rq *request, op auth.Operation) error {
	var p *auth.Principal
	var err error
	if s.opts.OAuth && auth.IsBearer(rq.r) {
		p, err = rq.accounts.AuthenticateBearer(rq.r, rq.account, rq.now)
	} else {
		p, err = rq.accounts.Authenticate(rq.ctx, rq.r, auth.Address{Account: rq.account, HostStyle: rq.hostStyle},
			rq.now, s.lookupPolicy(rq.account))
	}
	if err != nil {
		return err
	}
	rq.principal = p
	table := rq.target.Table
	if op == auth.OpCreateTable {
		table = "" // named in the body; only an account SAS can create tables
	}
	return p.CanDo(op, table)
}

// lookupPolicy resolves the stored access policies that service SAS
// tokens name with si.
func (s *Server) lookupPolicy(account string) auth.PolicyLookup {
	return func(ctx context.Context, table, id string) (auth.Policy, bool, error) {
		ids, err := s.store.GetTableACL(ctx, account, table)
		if partition.IsCode(err, partition.CodeTableNotFound) {
			return auth.Policy{}, false, nil
		}
		if err != nil {
			return auth.Policy{}, false, err
		}
		for _, si := range ids {
			if si.ID == id {
				return auth.Policy{Start: si.Start, Expiry: si.Expiry, Permission: si.Permission}, true, nil
			}
		}
		return auth.Policy{}, false, nil
	}
}
