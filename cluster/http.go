package cluster

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/internal/svcerr"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server/batch"
)

// Headers a node adds to a request it forwards to the leader. The leader
// trusts them only on a request that carries the cluster's signature.
const (
	forwardedProto = "X-Tabula-Forwarded-Proto" // the scheme the client used: https makes r.TLS non-nil
	forwardedFor   = "X-Tabula-Forwarded-For"   // the client's address, for SAS IP ranges
)

// Paths of the internal address.
const (
	statusPath    = "/cluster/status"
	rangesPath    = "/cluster/ranges"
	helloPath     = "/cluster/hello"
	snapshotPath  = "/cluster/snapshot"
	membersPath   = "/cluster/members"
	leasePath     = "/cluster/lease"
	placementPath = "/cluster/placement"
	splitPath     = "/cluster/split"
	mergePath     = "/cluster/merge"
)

// Signature purposes (transport.Sign).
const (
	purposeForward   = "forward"
	purposeStatus    = "status"
	purposeHello     = "hello"
	purposeSnapshot  = "snapshot"
	purposeMember    = "member"
	purposeLease     = "lease"
	purposePlacement = "placement"
)

// leaderHeader names, on a refusal from a node that does not lead, the
// internal address of the one that does.
const leaderHeader = "X-Tabula-Leader"

// HTTP serves a node's two addresses: the REST address clients use, where
// a node that is not the leader forwards each request to the one that is,
// and the internal address the nodes use among themselves (raft streams,
// forwarded requests, status).
type HTTP struct {
	node   *Node
	rest   atomic.Pointer[http.Handler] // set by Public
	raft   http.Handler
	routes map[uint64]string // addresses that override the address book's
	secret []byte
	log    *slog.Logger
	now    func() time.Time
	proxy  *httputil.ReverseProxy
}

// NewHTTP builds the handlers of node: raft is the transport's receiving
// handler; routes, when set, are addresses to reach some nodes at other
// than their own (a proxy's), the node's address book giving the rest.
func NewHTTP(node *Node, raft http.Handler, routes map[uint64]string, secret []byte) *HTTP {
	h := &HTTP{node: node, raft: raft, routes: routes, secret: secret, log: node.log, now: node.cfg.Now}
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	h.proxy = &httputil.ReverseProxy{
		Rewrite:      h.rewrite,
		Transport:    tr,
		ErrorHandler: h.forwardFailed,
		// Responses are the leader's, streamed as they come.
		FlushInterval: -1,
	}
	return h
}

// A TableRouter names the account and the table whose entities a REST
// request addresses ("" for none), without reading more of its body than
// it puts back: server.Server is one. With it, a node forwards a request
// to the leader of its table's range group; without it, or for requests
// that address no table's entities, to the system group's leader.
type TableRouter interface {
	RequestTable(r *http.Request) (account, table string)
}

// A KeyRouter names the PartitionKey of the first entity a REST request
// addresses, reading (and putting back) as much of its body as it needs:
// server.Server is one. A node asks it only for a table split into
// several ranges, to forward the request to the leader of the range that
// holds the key.
type KeyRouter interface {
	RequestPartitionKey(r *http.Request) (pk string, ok bool)
}

// maxHops bounds how many times a request is forwarded: a node that does
// not host a table's range group forwards to one of its voters, which
// forwards once more to the leader it knows.
const maxHops = 2

// hopsHeader counts the times a forwarded request was forwarded.
const hopsHeader = "X-Tabula-Forwarded-Hops"

// Public returns the handler of the REST address around rest, the Table
// service's handler (the server, on node.Store()); it fits
// server.Options.Front. Forwarded requests reaching the internal address
// are answered by rest too.
func (h *HTTP) Public(rest http.Handler) http.Handler {
	h.rest.Store(&rest)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.serve(w, r, rest, 0)
	})
}

// serve answers r, a client's (hops 0) or one forwarded by a peer: a
// client's is repeated while it is refused in passing (http_repeat.go); a
// peer's is answered once, saying whether its refusal may be repeated.
// Such a refusal is not reported here (access log, metrics): the peer
// repeats it, and reports what its client gets.
func (h *HTTP) serve(w http.ResponseWriter, r *http.Request, rest http.Handler, hops int) {
	if hops == 0 {
		h.serveRepeating(w, r, rest)
		return
	}
	start := time.Now()
	ctx, note := svcerr.WithRetryNote(r.Context())
	note.HoldReport()
	h.serveOnce(&retryMarker{ResponseWriter: w, note: note}, r.WithContext(ctx), rest, hops)
	if !note.Set() {
		note.Report(start)
	}
}

// serveOnce answers r here, or forwards it to the node that answers for
// what it addresses, if hops allow. A node that knows no leader serves it
// itself: its store refuses it (503 ServerBusy) and the client retries.
func (h *HTTP) serveOnce(w http.ResponseWriter, r *http.Request, rest http.Handler, hops int) {
	to := h.route(r, rest)
	if hops >= maxHops || to == 0 || to == h.node.cfg.ID || h.addr(to) == "" {
		rest.ServeHTTP(w, r)
		return
	}
	r = r.WithContext(withForward(r.Context(), to, hops+1))
	h.proxy.ServeHTTP(w, r)
}

// route returns the node to answer r (rest's TableRouter names what it
// addresses): the ready leader of the group that replicates that, as
// this node knows it (0 when it knows none). For a table whose range
// group this node does not host, it is one of the group's voters, which
// knows its leader.
func (h *HTTP) route(r *http.Request, rest http.Handler) uint64 {
	n := h.node
	rep := n.replica
	if router, ok := rest.(TableRouter); ok {
		if account, table := router.RequestTable(r); table != "" {
			if g, ok := n.requestGroup(r, rest, account, table); ok {
				if rep = n.group(g.ID); rep == nil {
					if u, ok := n.unloadedReplica(g.ID); ok {
						if lead := n.replica.leader.Load(); u.cold && slices.Contains(g.Voters, lead) {
							// Unloaded since the start, so with no
							// leader known: the system group's leader
							// stands at once in a group it loads with
							// none (tickReplicas).
							return lead
						}
						// Its leader, as it knew it: the request, there,
						// wakes the group (this node, if it led it).
						return u.leader
					}
					return n.someVoter(g.Voters)
				}
			}
		}
	}
	if rep.ready.Load() {
		return n.cfg.ID
	}
	if l := rep.leader.Load(); l != 0 || rep == n.replica {
		return l
	}
	// A range group whose leader this node has not heard from yet (it
	// just started hosting it): its creator, the system group's leader,
	// leads it in all likelihood.
	return n.replica.leader.Load()
}

// requestGroup returns the range group that answers a request of a
// table's entities: the table's only one, or, for a table split into
// ranges, the one that holds the request's first PartitionKey (the
// first range when the request names none). ok is false for a table
// without range groups, or one this node does not know.
func (n *Node) requestGroup(r *http.Request, rest http.Handler, account, table string) (partition.RangeGroup, bool) {
	ranges, err := n.st().TableRanges(account, table)
	if err != nil || len(ranges) == 0 {
		return partition.RangeGroup{}, false
	}
	if kr, ok := rest.(KeyRouter); ok && len(ranges) > 1 {
		if pk, ok := kr.RequestPartitionKey(r); ok {
			if g, err := n.st().TableGroupFor(account, table, pk); err == nil {
				return g, true
			}
		}
	}
	return ranges[0].Group, true
}

// Internal is the handler of the internal address.
func (h *HTTP) Internal() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(transport.StreamPath, h.raft)
	mux.HandleFunc(statusPath, h.status)
	mux.HandleFunc(rangesPath, h.rangeReport)
	mux.HandleFunc(membersPath, h.membersHandler)
	mux.HandleFunc(leasePath, h.leaseHandler)
	mux.HandleFunc(placementPath, h.placementHandler)
	mux.HandleFunc(splitPath, h.reshapeHandler(h.node.SplitTable))
	mux.HandleFunc(mergePath, h.reshapeHandler(h.node.MergeTable))
	mux.HandleFunc(snapshotPath, func(w http.ResponseWriter, r *http.Request) {
		if _, err := transport.Verify(r, h.secret, purposeSnapshot, h.node.cfg.ID, h.now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		token, err := hex.DecodeString(r.URL.Query().Get("token"))
		if err != nil {
			http.Error(w, "bad token", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		if err := h.node.ServeSnapshot(w, token); err != nil {
			// Before any byte, a clean refusal; after, the cut stream
			// fails the follower's checksum.
			http.Error(w, err.Error(), http.StatusNotFound)
		}
	})
	mux.HandleFunc(helloPath, func(w http.ResponseWriter, r *http.Request) {
		if _, err := transport.Verify(r, h.secret, purposeHello, h.node.cfg.ID, h.now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(forwardedProto) == "" {
			mux.ServeHTTP(w, r)
			return
		}
		if _, err := transport.Verify(r, h.secret, purposeForward, h.node.cfg.ID, h.now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// The client's view of the request, as the node it reached saw it.
		if r.Header.Get(forwardedProto) == "https" {
			r.TLS = &tls.ConnectionState{HandshakeComplete: true}
		}
		if addr := r.Header.Get(forwardedFor); addr != "" {
			r.RemoteAddr = addr
		}
		// Forwarded again only while hops allow: a node that cannot
		// answer it then refuses it (503 ServerBusy) and the client
		// retries.
		rest := h.rest.Load()
		if rest == nil { // not serving the REST API yet
			h.forwardFailed(w, r, errors.New("the REST server is not up yet"))
			return
		}
		hops, err := strconv.Atoi(r.Header.Get(hopsHeader))
		if err != nil || hops < 0 {
			hops = maxHops // no count, or a bad one: not forwarded again
		}
		h.serve(w, r, *rest, hops)
	})
}

// addr is where to reach node id.
func (h *HTTP) addr(id uint64) string {
	if a := h.routes[id]; a != "" {
		return a
	}
	return h.node.members.get(id)
}

// ask sends node id a GET of path (with its query) on its internal
// address, signed for purpose.
func (h *HTTP) ask(ctx context.Context, id uint64, purpose, path string) (*http.Response, error) {
	addr := h.addr(id)
	if addr == "" {
		return nil, fmt.Errorf("cluster: no address for node %d", id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	transport.Sign(req, h.secret, purpose, h.node.cfg.ID, id, h.now())
	return h.proxy.Transport.RoundTrip(req)
}

// FetchSnapshot fetches a snapshot from node from's internal address: it
// fits Config.FetchSnapshot (through a variable set once the HTTP exists).
func (h *HTTP) FetchSnapshot(ctx context.Context, from uint64, token []byte) (io.ReadCloser, error) {
	resp, err := h.ask(ctx, from, purposeSnapshot, snapshotPath+"?token="+hex.EncodeToString(token))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		return nil, fmt.Errorf("cluster: snapshot from node %d: %s: %s", from, resp.Status, bytes.TrimSpace(msg))
	}
	return resp.Body, nil
}

func (h *HTTP) rewrite(pr *httputil.ProxyRequest) {
	leader, hops := forwardOf(pr.In.Context())
	pr.Out.Header.Set(hopsHeader, strconv.Itoa(hops))
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = h.addr(leader)
	pr.Out.Host = pr.In.Host // production-style URLs name the account in it
	proto := "http"
	if pr.In.TLS != nil {
		proto = "https"
	}
	pr.Out.Header.Set(forwardedProto, proto)
	pr.Out.Header.Set(forwardedFor, pr.In.RemoteAddr)
	transport.Sign(pr.Out, h.secret, purposeForward, h.node.cfg.ID, leader, h.now())
}

// forwardFailed answers a request the leader could not be reached for:
// 503 ServerBusy, which the SDKs retry.
func (h *HTTP) forwardFailed(w http.ResponseWriter, r *http.Request, err error) {
	h.log.Warn("cluster: forwarding to the leader failed", "leader", h.node.Leader(), "err", err)
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		svcerr.MarkRetry(r.Context()) // a read changes nothing, wherever it broke off
	}
	var id [16]byte
	rand.Read(id[:])
	rid := hex.EncodeToString(id[:])
	w.Header().Set("Content-Type", batch.ErrorContentType)
	w.Header().Set("X-Ms-Error-Code", "ServerBusy")
	w.Header().Set("X-Ms-Request-Id", rid)
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(batch.ErrorBody(-1, "ServerBusy", msgServerBusy, rid, h.now()))
}

// Status is what a node says of itself and, when it leads, of its peers.
type Status struct {
	Node    uint64       `json:"node"`
	Leader  uint64       `json:"leader"`
	State   string       `json:"state"`
	Ready   bool         `json:"ready"`
	Term    uint64       `json:"term"`
	Commit  uint64       `json:"commit"`
	Applied uint64       `json:"applied"`
	Failed  string       `json:"failed,omitempty"`
	Peers   []PeerStatus `json:"peers"`
	// SnapshotsMade and SnapshotsInstalled count the snapshots this node
	// made for lagging followers, and installed to catch up itself.
	SnapshotsMade      int `json:"snapshots_made"`
	SnapshotsInstalled int `json:"snapshots_installed"`
	// SpanSnapshotsMade and SpanSnapshotsInstalled count the same for
	// range groups, whose snapshots hold their table's span alone.
	SpanSnapshotsMade      int `json:"span_snapshots_made"`
	SpanSnapshotsInstalled int `json:"span_snapshots_installed"`
	// Ranges are the range partitions of the tables whose leases this
	// node holds: those of the range groups it leads, and, when it leads
	// the system group, those of the tables without a range group. The
	// leaseholder serves the reads, so its rates are the ranges' load.
	Ranges []RangeStatus `json:"ranges,omitempty"`
	// Groups are the range groups this node hosts, each with its leader
	// as this node knows it and how far this node applied it; only when
	// the request asks (?groups=1).
	Groups []GroupStatus `json:"groups,omitempty"`
	// RangeGroups are the range groups this node hosts, Quiesced those
	// of them idle (not ticked), Dormant those of the idle ones that
	// dropped their raft state (dormant.go), Unloaded those of the
	// dormant ones that left memory (unload.go), and DormantWakes counts
	// the replicas that took their raft state up again since the node
	// started, ReplicaLoads the unloaded ones loaded again.
	RangeGroups  int    `json:"range_groups"`
	Quiesced     int    `json:"quiesced"`
	Dormant      int    `json:"dormant"`
	Unloaded     int    `json:"unloaded"`
	DormantWakes uint64 `json:"dormant_wakes"`
	ReplicaLoads uint64 `json:"replica_loads"`
}

// GroupStatus is a range group as a node hosting it sees it: its leader,
// how far this node applied it, and its members' nodes as its log has
// them here (voters, and learners catching up); for a replica Unloaded
// (unload.go), the voters its catalog descriptor names.
type GroupStatus struct {
	Group    uint64   `json:"group"`
	Leader   uint64   `json:"leader"`
	Applied  uint64   `json:"applied"`
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners,omitempty"`
	Unloaded bool     `json:"unloaded,omitempty"`
}

// RangeStatus is one range partition of a table as its leaseholder sees
// it: the group that replicates it, the nodes its descriptor names as
// the group's voters (Replicas), the nodes whose members the group's log
// has now (Members: voters, then learners catching up, which differ from
// Replicas while the group moves), and the node that leads the group.
type RangeStatus struct {
	Account string `json:"account"`
	Table   string `json:"table"`
	partition.RangeInfo
	Group       uint64   `json:"group"`
	Replicas    []uint64 `json:"replicas"`
	Members     []uint64 `json:"members"`
	Learners    []uint64 `json:"learners,omitempty"`
	Leaseholder uint64   `json:"leaseholder"`
	// Partitions are, for a range group's range, the leaseholder's range
	// partitions that start in it (partition/ranges.go splits them by
	// size and load): where the placement controller splits the group.
	Partitions []partition.RangeInfo `json:"partitions,omitempty"`
}

// PeerStatus is a peer as the node sees it; replication progress only
// from the leader.
type PeerStatus struct {
	Node   uint64 `json:"node"`
	Addr   string `json:"addr"`
	Match  uint64 `json:"match,omitempty"`
	Active bool   `json:"active,omitempty"`
	// Live says the node heard from the peer within an election timeout
	// (any message, the per-tick liveness one included).
	Live bool `json:"live"`
	// Draining says the peer is being drained of its range groups
	// before it leaves (tabula cluster decommission).
	Draining bool `json:"draining,omitempty"`
	// DownSince is when the peer was last heard before it fell silent,
	// as the system group recorded it (the placement controller counts
	// DeadAfter from there).
	DownSince *time.Time `json:"down_since,omitempty"`
}

func (h *HTTP) status(w http.ResponseWriter, r *http.Request) {
	if !h.verifyOperator(w, r, purposeStatus) {
		return
	}
	st := h.node.Status()
	down, _ := h.node.st().NodesDown() // a damaged record shows as none; the controller logs it
	for id, addr := range h.node.members.all() {
		p := st.progress[id]
		ps := PeerStatus{Node: id, Addr: addr, Match: p.Match, Active: p.Active, Live: id == st.Node || st.live[id],
			Draining: h.node.members.isDraining(id)}
		if t, ok := down[id]; ok {
			ps.DownSince = &t
		}
		st.Peers = append(st.Peers, ps)
	}
	sortPeers(st.Peers)
	st.Ranges = h.node.ranges(r.Context())
	if r.URL.Query().Get("groups") != "" {
		st.Groups = h.node.groupStatus()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st.Status)
}

func sortPeers(ps []PeerStatus) {
	slices.SortFunc(ps, func(a, b PeerStatus) int { return cmp.Compare(a.Node, b.Node) })
}

type forwardKey struct{}

// forward is where a request goes, and how many times it will have been
// forwarded once there.
type forward struct {
	to   uint64
	hops int
}

// withForward carries the node a request is forwarded to from serve to
// the proxy's rewrite, so both use the one choice of it.
func withForward(ctx context.Context, to uint64, hops int) context.Context {
	return context.WithValue(ctx, forwardKey{}, forward{to, hops})
}

func forwardOf(ctx context.Context) (to uint64, hops int) {
	f, _ := ctx.Value(forwardKey{}).(forward)
	return f.to, f.hops
}
