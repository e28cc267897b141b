package server

import (
	"context"
	"net/http"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server/storagexml"
)

const xmlContentType = "application/xml"

// serviceProperties returns the account's service properties: as last
// set, else the defaults. They are read from the store once per account
// and then served from memory, since CORS consults them on every request.
func (s *Server) serviceProperties(ctx context.Context, account string) (storagexml.ServiceProperties, error) {
	s.mu.Lock()
	p, ok := s.properties[account]
	s.mu.Unlock()
	if ok {
		return p, nil
	}
	p = storagexml.DefaultServiceProperties()
	if !s.Accounts().Has(account) {
		return p, nil // not cached: the set of names a client can send is unbounded
	}
	raw, err := s.store.GetServiceProperties(ctx, account)
	if err != nil {
		return p, err
	}
	if raw != nil {
		u, err := storagexml.ParseServiceProperties(raw)
		if err != nil {
			return p, err
		}
		p = p.Merge(u)
	}
	s.mu.Lock()
	s.properties[account] = p
	s.mu.Unlock()
	return p, nil
}

// ForgetCachedProperties drops the service properties held in memory, so
// the next request reads them from the store again: a cluster node calls
// it when it becomes the leader, as another node may have changed them.
func (s *Server) ForgetCachedProperties() {
	s.mu.Lock()
	clear(s.properties)
	s.mu.Unlock()
}

// corsRules returns the account's CORS rules, none if they cannot be read.
func (s *Server) corsRules(ctx context.Context, account string) []storagexml.CorsRule {
	p, err := s.serviceProperties(ctx, account)
	if err != nil {
		if _, _, _, ok := describe(err); !ok { // a refusal (a cluster node that is not the leader) is no failure
			s.log.Error("reading service properties", "account", account, "err", err)
		}
		return nil
	}
	return p.Cors
}

// getServiceProperties answers GET /?restype=service&comp=properties.
func (s *Server) getServiceProperties(rq *request) error {
	p, err := s.serviceProperties(rq.ctx, rq.account)
	if err != nil {
		return err
	}
	rq.reply(http.StatusOK, xmlContentType, storagexml.MarshalServiceProperties(p))
	return nil
}

// setServiceProperties answers PUT /?restype=service&comp=properties: the
// elements present replace the current ones (202 Accepted, as the service
// answers).
func (s *Server) setServiceProperties(rq *request) error {
	body, err := rq.readBody()
	if err != nil {
		return err
	}
	u, err := storagexml.ParseServiceProperties(body)
	if err != nil {
		return err
	}
	// One writer at a time, so two concurrent updates of different
	// elements cannot lose one another.
	s.propertiesWrite.Lock()
	defer s.propertiesWrite.Unlock()
	cur, err := s.serviceProperties(rq.ctx, rq.account)
	if err != nil {
		return err
	}
	next := cur.Merge(u)
	if err := s.store.SetServiceProperties(rq.ctx, rq.account, storagexml.MarshalServiceProperties(next)); err != nil {
		return err
	}
	s.mu.Lock()
	s.properties[rq.account] = next
	s.mu.Unlock()
	rq.reply(http.StatusAccepted, "", nil)
	return nil
}

// getServiceStats answers GET /?restype=service&comp=stats. The service
// answers it on the secondary endpoint only. A single node has no replica
// lagging behind: replication is always live and in sync.
func (s *Server) getServiceStats(rq *request) error {
	if !rq.target.Secondary {
		return invalidQueryParameter("Service statistics are served by the account's secondary endpoint only.")
	}
	g := storagexml.GeoReplication{Status: storagexml.GeoLive, LastSyncTime: rq.now}
	rq.reply(http.StatusOK, xmlContentType, storagexml.MarshalServiceStats(g))
	return nil
}

// getTableACL answers GET /t?comp=acl with the stored access policies.
func (s *Server) getTableACL(rq *request) error {
	ids, err := s.store.GetTableACL(rq.ctx, rq.account, rq.target.Table)
	if err != nil {
		return err
	}
	out := make([]storagexml.SignedIdentifier, len(ids))
	for i, id := range ids {
		out[i] = storagexml.SignedIdentifier{ID: id.ID, AccessPolicy: storagexml.AccessPolicy{
			Start: id.Start, Expiry: id.Expiry, Permission: id.Permission}}
	}
	rq.reply(http.StatusOK, xmlContentType, storagexml.MarshalSignedIdentifiers(out))
	return nil
}

// setTableACL answers PUT /t?comp=acl: the policies replace the current
// ones.
func (s *Server) setTableACL(rq *request) error {
	body, err := rq.readBody()
	if err != nil {
		return err
	}
	ids, err := storagexml.ParseSignedIdentifiers(body)
	if err != nil {
		return err
	}
	in := make([]partition.SignedIdentifier, len(ids))
	for i, id := range ids {
		in[i] = partition.SignedIdentifier{ID: id.ID, Start: id.AccessPolicy.Start,
			Expiry: id.AccessPolicy.Expiry, Permission: id.AccessPolicy.Permission}
	}
	if err := s.store.SetTableACL(rq.ctx, rq.account, rq.target.Table, in); err != nil {
		return err
	}
	rq.reply(http.StatusNoContent, "", nil)
	return nil
}

// preflight answers a CORS preflight (OPTIONS) request, which needs no
// credentials, by the account's CORS rules.
func (s *Server) preflight(rq *request) error {
	rules := s.corsRules(rq.ctx, rq.account)
	h := rq.r.Header
	headers, err := storagexml.Preflight(rules, h.Get("Origin"), h.Get("Access-Control-Request-Method"), h.Get("Access-Control-Request-Headers"))
	if err != nil {
		return err
	}
	for k, v := range headers {
		rq.w.Header()[k] = v
	}
	rq.status = http.StatusOK // the preflight's own headers, not an actual request's
	rq.w.WriteHeader(http.StatusOK)
	return nil
}
