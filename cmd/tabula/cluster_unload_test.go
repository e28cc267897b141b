package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabuladb/tabula/cluster"
)

// TestClusterIdleRangesUnload: three real nodes, four tables each in a
// range group of its own. Once idle, every node unloads its replicas of
// the groups (cluster status counts them); reads and writes through
// every node then find them again, routed to the leaders the unloaded
// records name and loaded back, and see every acknowledged write. Once
// idle again and every node killed with SIGKILL and started, the nodes
// warm the groups (each elects a leader, which reports its range);
// requests through every node then find every write.
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
	waitUnloaded := func() {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			done := true
			for i, st := range statuses() {
				done = done && st.Unloaded == len(tables) && st.RangeGroups == len(tables)
				if time.Now().After(deadline) {
					t.Fatalf("node %d: %d of %d range groups unloaded after 60 s", i+1, st.Unloaded, st.RangeGroups)
				}
			}
			if done {
				return
			}
		}
	}
	// readWrite reads every acknowledged write through every node, and
	// writes to every table through every node.
	readWrite := func(when string) {
		t.Helper()
		for node := range 3 {
			for k, n := range acked {
				tb, rk, _ := strings.Cut(k, "/")
				resp, err := c.client(node, tb).GetEntity(ctx, "p", rk, nil)
				if err != nil {
					t.Fatalf("read %s through node %d %s: %v", k, node+1, when, err)
				}
				if !bytes.Contains(resp.Value, []byte(fmt.Sprintf(`"N":%d`, n))) {
					t.Fatalf("read %s through node %d %s: %s, want N=%d", k, node+1, when, resp.Value, n)
				}
			}
			for _, tb := range tables {
				if _, err := c.client(node, tb).UpsertEntity(ctx, entityJSON("p", fmt.Sprintf("q%d", node), node), nil); err != nil {
					t.Fatalf("write to %s through node %d %s: %v", tb, node+1, when, err)
				}
				acked[tb+"/"+fmt.Sprintf("q%d", node)] = node
			}
		}
	}
	waitUnloaded()
	before := loads()
	readWrite("after the ranges unloaded")
	after := loads()
	if after < before+uint64(len(tables)) {
		t.Fatalf("replica loads %d before the requests, %d after: want one a table at least", before, after)
	}

	// Every node killed at once and started again: the nodes start the
	// groups unloaded, with no leader, and warm them: each elects a
	// leader, whose status reports its range.
	waitUnloaded()
	for i, p := range c.procs {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(t)
		c.procs[i] = nil
	}
	for i := range c.procs {
		c.start(i, testSecret)
	}
	c.leader()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		led := map[string]bool{} // the tables whose range a leaseholder reports
		for _, st := range statuses() {
			for _, r := range st.Ranges {
				if r.Leaseholder != 0 {
					led[r.Table] = true
				}
			}
		}
		if len(led) == len(tables) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a restart of the whole cluster, the leaseholders report the ranges of %v, want %d tables", led, len(tables))
		}
	}
	if loads() < uint64(len(tables)) {
		t.Fatalf("replica loads %d after the restart: want the warming of one a table at least", loads())
	}
	readWrite("after a restart of the whole cluster")
}
