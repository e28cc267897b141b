package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/cluster"
)

// TestClusterIdleRangesUnload: three real nodes, four tables each in a
// range group of its own. Once idle, every node unloads its replicas of
// the groups (cluster status counts them); reads and writes through
// every node then find them again, routed to the leaders the unloaded
// records name and loaded back, and see every acknowledged write.
func TestClusterIdleRangesUnload(t *testing.T) {
	c := startProcCluster(t, 3, "--placement-interval", "0")
	ctx := context.Background()
	c.leader()
	tables := []string{"idleone", "idletwo", "idlethree", "idlefour"}
	for _, tb := range tables {
		if _, err := c.client(0, tb).CreateTable(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	acked := map[string]int{}
	for i := range 40 {
		tb, rk := tables[i%len(tables)], fmt.Sprintf("r%02d", i)
		if _, err := c.client(i%3, tb).UpsertEntity(ctx, entityJSON("p", rk, i), nil); err != nil {
			t.Fatalf("upsert %s/%s: %v", tb, rk, err)
		}
		acked[tb+"/"+rk] = i
	}

	// statuses returns every node's status.
	statuses := func() []cluster.Status {
		t.Helper()
		var out []cluster.Status
		for i, a := range c.nodeAddrs {
			st, err := fetchStatus(a, uint64(i+1), []byte(testSecret))
			if err != nil {
				t.Fatalf("status of node %d: %v", i+1, err)
			}
			out = append(out, st)
		}
		return out
	}
	loads := func() (sum uint64) {
		for _, st := range statuses() {
			sum += st.ReplicaLoads
		}
		return sum
	}

	// Unloaded after dozing (two election timeouts) and ten more: about
	// 12 s at the default 100 ms tick.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		done := true
		for i, st := range statuses() {
			done = done && st.Unloaded == len(tables) && st.RangeGroups == len(tables)
			if time.Now().After(deadline) {
				t.Fatalf("node %d: %d of %d range groups unloaded after 60 s", i+1, st.Unloaded, st.RangeGroups)
			}
		}
		if done {
			break
		}
	}
	before := loads()

	for node := range 3 {
		for k, n := range acked {
			tb, rk, _ := strings.Cut(k, "/")
			resp, err := c.client(node, tb).GetEntity(ctx, "p", rk, nil)
			if err != nil {
				t.Fatalf("read %s through node %d after the ranges unloaded: %v", k, node+1, err)
			}
			if !bytes.Contains(resp.Value, []byte(fmt.Sprintf(`"N":%d`, n))) {
				t.Fatalf("read %s through node %d: %s, want N=%d", k, node+1, resp.Value, n)
			}
		}
		for _, tb := range tables {
			if _, err := c.client(node, tb).UpsertEntity(ctx, entityJSON("q", fmt.Sprint(node), node), nil); err != nil {
				t.Fatalf("write to %s through node %d after the ranges unloaded: %v", tb, node+1, err)
			}
		}
	}
	after := loads()
	if after < before+uint64(len(tables)) {
		t.Fatalf("replica loads %d before the requests, %d after: want one a table at least", before, after)
	}
}
