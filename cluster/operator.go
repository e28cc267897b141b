package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/partition"
)

// The internal address's operator requests: membership (add, drain,
// remove), lease moves, and the placement of range groups (voters,
// splits). Each is signed with the cluster secret (for this node, or for
// any: a tool that has not learned the node's id yet), and a node that
// cannot carry it out answers 503 with the address of one that can.

// membersHandler adds (POST ?addr=), drains (POST ?drain=) and removes
// (DELETE ?id=) members. A node that does not lead refuses with 503 and
// the leader's address.
func (h *HTTP) membersHandler(w http.ResponseWriter, r *http.Request) {
	if !h.verifyOperator(w, r, purposeMember) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var (
		id  uint64
		err error
	)
	switch r.Method {
	case http.MethodPost:
		if drain := r.URL.Query().Get("drain"); drain != "" {
			if id, err = strconv.ParseUint(drain, 10, 64); err != nil || id == 0 {
				http.Error(w, "drain is not a node id", http.StatusBadRequest)
				return
			}
			err = h.node.DrainMember(ctx, id)
			break
		}
		addr := r.URL.Query().Get("addr")
		if _, _, err := net.SplitHostPort(addr); err != nil || checkAddress(addr) != nil {
			http.Error(w, fmt.Sprintf("addr %q is missing or not host:port", addr), http.StatusBadRequest)
			return
		}
		id, err = h.node.AddMember(ctx, addr)
	case http.MethodDelete:
		id, err = strconv.ParseUint(r.URL.Query().Get("id"), 10, 64)
		if err != nil || id == 0 {
			http.Error(w, "id is missing or not a node id", http.StatusBadRequest)
			return
		}
		err = h.node.RemoveMember(ctx, id)
	default:
		http.Error(w, "POST or DELETE", http.StatusMethodNotAllowed)
		return
	}
	if err != nil {
		if l := h.node.Leader(); l != 0 && l != h.node.cfg.ID {
			w.Header().Set(leaderHeader, h.addr(l))
		}
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	// A new node needs every member's address, whoever leads.
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(struct {
		ID      uint64            `json:"id"`
		Members map[uint64]string `json:"members"`
	}{id, h.node.Members()})
}

// leaseHandler moves the lease of the range of a table that holds
// PartitionKey at (the first range's when at is absent) (POST
// ?account=&table=&to=&at=). A node holding no replica of the range's
// group refuses with 503 and the address of one of its voters.
func (h *HTTP) leaseHandler(w http.ResponseWriter, r *http.Request) {
	q, ok := h.operatorPost(w, r, purposeLease)
	if !ok {
		return
	}
	to, err := strconv.ParseUint(q.Get("to"), 10, 64)
	if err != nil || to == 0 || q.Get("table") == "" || q.Get("account") == "" {
		http.Error(w, "account, table and to (a node id) are needed", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	group, err := h.node.TransferLease(ctx, q.Get("account"), q.Get("table"), q.Get("at"), to)
	switch {
	case errors.Is(err, ErrNotHosted):
		if g, gerr := h.node.st().TableGroupFor(q.Get("account"), q.Get("table"), q.Get("at")); gerr == nil && g.ID != 0 {
			w.Header().Set(leaderHeader, h.addr(h.node.someVoter(g.Voters)))
		}
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case errors.Is(err, ErrNotLeaseholder):
		if l := h.node.groupLeader(group); l != 0 {
			w.Header().Set(leaderHeader, h.addr(l))
		}
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case partition.IsCode(err, partition.CodeTableNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case errors.Is(err, ErrBadLease):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(struct {
		Group       uint64 `json:"group"`
		Leaseholder uint64 `json:"leaseholder"`
	}{group, to})
}

// placementHandler names the voters of the range group of a table that
// holds PartitionKey at (the first range's when at is absent) (POST
// ?account=&table=&voters=1,2,3&at=). A node that does not lead the
// system group refuses with 503 and the leader's address.
func (h *HTTP) placementHandler(w http.ResponseWriter, r *http.Request) {
	q, ok := h.operatorPost(w, r, purposePlacement)
	if !ok {
		return
	}
	var voters []uint64
	for _, f := range strings.Split(q.Get("voters"), ",") {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil || v == 0 {
			http.Error(w, "voters are node ids, comma-separated", http.StatusBadRequest)
			return
		}
		voters = append(voters, v)
	}
	if q.Get("table") == "" || q.Get("account") == "" {
		http.Error(w, "account, table and voters are needed", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	g, err := h.node.st().TableGroupFor(q.Get("account"), q.Get("table"), q.Get("at"))
	switch {
	case err != nil:
	case g.ID == 0:
		err = fmt.Errorf("%w: table %s has no range group (the system group replicates it)", ErrBadPlacement, q.Get("table"))
	default:
		err = h.node.SetGroupVoters(ctx, g.ID, voters)
	}
	h.placementAnswer(w, err, struct {
		Group  uint64   `json:"group"`
		Voters []uint64 `json:"voters"`
	}{g.ID, voters})
}

// reshapeHandler splits a table's range at a PartitionKey
// (/cluster/split, reshape Node.SplitTable), or merges the range that
// starts there into the one before it (/cluster/merge, Node.MergeTable):
// POST ?account=&table=&at=. A node that does not lead the system group
// refuses with 503 and the leader's address.
func (h *HTTP) reshapeHandler(reshape func(ctx context.Context, account, table, at string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, ok := h.operatorPost(w, r, purposePlacement)
		if !ok {
			return
		}
		if q.Get("table") == "" || q.Get("account") == "" || q.Get("at") == "" {
			http.Error(w, "account, table and at (a PartitionKey) are needed", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		h.placementAnswer(w, reshape(ctx, q.Get("account"), q.Get("table"), q.Get("at")), struct {
			At string `json:"at"`
		}{q.Get("at")})
	}
}

// placementAnswer answers a placement request: 404 for a table that is
// not there, 400 for a request that cannot be done, 503 with the system
// group's leader's address otherwise; on success, body as JSON.
func (h *HTTP) placementAnswer(w http.ResponseWriter, err error, body any) {
	switch {
	case partition.IsCode(err, partition.CodeTableNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case errors.Is(err, ErrBadPlacement), partition.IsCode(err, partition.CodeInvalidInput):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		if l := h.node.Leader(); l != 0 && l != h.node.cfg.ID {
			w.Header().Set(leaderHeader, h.addr(l))
		}
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(body)
}

// operatorPost admits an operator's POST signed for purpose, and returns
// its query; it answers 401 or 405 and reports false otherwise.
func (h *HTTP) operatorPost(w http.ResponseWriter, r *http.Request, purpose string) (url.Values, bool) {
	if !h.verifyOperator(w, r, purpose) {
		return nil, false
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST", http.StatusMethodNotAllowed)
		return nil, false
	}
	return r.URL.Query(), true
}

// verifyOperator checks the signature of an operator's request, which
// may be signed for this node or for any (receiver 0: a tool that has not
// learned the node's id yet); it answers 401 and reports false if the
// signature is not the cluster's.
func (h *HTTP) verifyOperator(w http.ResponseWriter, r *http.Request, purpose string) bool {
	if _, err := transport.Verify(r, h.secret, purpose, h.node.cfg.ID, h.now()); err != nil {
		if _, err := transport.Verify(r, h.secret, purpose, 0, h.now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return false
		}
	}
	return true
}
