package cluster

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRangeReportsStream gathers the ranges of a three-node cluster over
// the internal address, one report a line (rangesPath): every range its
// leaseholder reports, once; from a node of an earlier build through its
// status; and, past a status too large to read, the other nodes' ranges
// still.
func TestRangeReportsStream(t *testing.T) {
	c := &testCluster{t: t, net: newSimNet(29), nodes: map[uint64]*testNode{}, rangeGroups: true,
		members: map[uint64]string{1: "sim-1", 2: "sim-2", 3: "sim-3"}}
	c.startAll(3)
	const tables = 6
	for i := range tables {
		createVia(c, fmt.Sprintf("reported%d", i))
	}
	groupsOf := func(stats []RangeStatus) []uint64 {
		var out []uint64
		for _, rs := range stats {
			if rs.Group != systemGroup {
				out = append(out, rs.Group)
			}
		}
		slices.Sort(out)
		return out
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		reported := groupsOf(slices.Collect(c.net.rangeStats(context.Background())))
		if len(reported) == tables {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leaseholders report groups %v, want %d", reported, tables)
		}
	}

	secret := []byte("a cluster secret of thirty-two bytes")
	var mu sync.Mutex
	servers := map[uint64]http.Handler{} // what each node's internal address serves, under mu
	serve := func(id uint64, h http.Handler) {
		mu.Lock()
		defer mu.Unlock()
		servers[id] = h
	}
	routes := map[uint64]string{}
	for id, tn := range c.nodes {
		serve(id, NewHTTP(tn.node, http.NotFoundHandler(), nil, secret).Internal())
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			h := servers[id]
			mu.Unlock()
			h.ServeHTTP(w, r)
		}))
		s.Config.Protocols = new(http.Protocols)
		s.Config.Protocols.SetUnencryptedHTTP2(true) // as the nodes' internal addresses
		s.Start()
		t.Cleanup(s.Close)
		routes[id] = strings.TrimPrefix(s.URL, "http://")
	}
	gather := func() []RangeStatus {
		h := NewHTTP(c.nodes[c.peers[0]].node, http.NotFoundHandler(), routes, secret)
		return slices.Collect(h.RangeStats(context.Background()))
	}
	// Leases may move between a gather and the nodes' own reports: ask
	// again until the two agree.
	// Groups past 800 are made up by the test's own handlers.
	same := func(what string, nodes []uint64, madeUp ...uint64) []uint64 {
		t.Helper()
		var got, want []uint64
		for range 50 {
			var reports []RangeStatus
			for _, id := range nodes {
				reports = slices.AppendSeq(reports, c.nodes[id].node.eachRange(context.Background()))
			}
			for _, g := range madeUp {
				reports = append(reports, RangeStatus{Group: g})
			}
			if got, want = groupsOf(gather()), groupsOf(reports); slices.Equal(got, want) {
				return got
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: gathered groups %v, want %v", what, got, want)
		return nil
	}
	if got := same("every node streaming", c.peers); len(got) != tables {
		t.Fatalf("gathered groups %v, want %d", got, tables)
	}

	// An earlier build: no rangesPath, its report in its status. The
	// node that leads the most groups is made the earlier build (leases
	// gather on the node that created the groups).
	led := func(id uint64) int { return len(groupsOf(c.nodes[id].node.ranges(context.Background()))) }
	old := slices.MaxFunc(c.peers, func(a, b uint64) int { return cmp.Compare(led(a), led(b)) })
	if led(old) == 0 {
		t.Fatal("no node reports a range group")
	}
	current := NewHTTP(c.nodes[old].node, http.NotFoundHandler(), nil, secret).Internal()
	serve(old, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == rangesPath {
			http.NotFound(w, r)
			return
		}
		current.ServeHTTP(w, r)
	}))
	same("one node of an earlier build", c.peers)

	// A node whose report holds a status past maxRangeStatus, then one
	// more: what follows the large one is left out, the others' kept.
	bad := c.peers[0]
	if bad == old {
		bad = c.peers[1]
	}
	serve(bad, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "{\"group\": 900, \"table\": %q}\n{\"group\": 901}\n", strings.Repeat("x", maxRangeStatus))
	}))
	others := slices.DeleteFunc(slices.Clone(c.peers), func(id uint64) bool { return id == bad })
	same("one node's report too large", others)

	// A node slow to make its report, sending every 300 ms: all of it
	// is read, though it takes longer than reportIdleTimeout in all.
	// Then one that falls silent past reportIdleTimeout: what it sent
	// before is kept.
	sendEvery := func(pause time.Duration, groups ...uint64) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for i, g := range groups {
				if i > 0 {
					select {
					case <-time.After(pause):
					case <-r.Context().Done():
						return
					}
				}
				fmt.Fprintf(w, "{\"group\": %d}\n", g)
				http.NewResponseController(w).Flush()
			}
		})
	}
	serve(bad, sendEvery(300*time.Millisecond, 801, 802, 803, 804, 805))
	same("one node slow to report", others, 801, 802, 803, 804, 805)
	serve(bad, sendEvery(reportIdleTimeout+500*time.Millisecond, 811, 812))
	same("one node falling silent", others, 811)
}
