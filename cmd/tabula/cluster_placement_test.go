package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabuladb/tabula/cluster"
)

// waitRanges waits until the leaseholders report a range of every table
// of tables, with no learner, and ok holds of them all; it returns them.
func (c *procCluster) waitRanges(tables []string, timeout time.Duration, what string, ok func(map[string]cluster.RangeStatus) bool) map[string]cluster.RangeStatus {
	c.t.Helper()
	var got map[string]cluster.RangeStatus
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		got = map[string]cluster.RangeStatus{}
		for i, a := range c.nodeAddrs {
			if c.procs[i] == nil {
				continue
			}
			st, err := fetchStatus(a, uint64(i+1), []byte(testSecret))
			if err != nil {
				continue
			}
			for _, r := range st.Ranges {
				if slices.Contains(tables, r.Table) && len(r.Learners) == 0 {
					got[r.Table] = r
				}
			}
		}
		if len(got) == len(tables) && ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			for i, p := range c.procs {
				if p != nil {
					c.t.Logf("node %d:\n%s", i+1, p.stderr)
				}
			}
			c.t.Fatalf("the tables' groups did not settle with %s in %v: %+v", what, timeout, got)
		}
	}
}

// eachRange says whether ok holds of every range.
func eachRange(ok func(r cluster.RangeStatus) bool) func(map[string]cluster.RangeStatus) bool {
	return func(rs map[string]cluster.RangeStatus) bool {
		for _, r := range rs {
			if !ok(r) {
				return false
			}
		}
		return true
	}
}

// settled says whether a range's group has the members its replicas
// name, three of them.
func settled(r cluster.RangeStatus) bool {
	return len(r.Members) == 3 && slices.Equal(slices.Sorted(slices.Values(r.Replicas)), slices.Sorted(slices.Values(r.Members)))
}

// TestClusterPlacement runs four real nodes with range groups and a
// placement controller that counts a node dead after three seconds.
// Four tables' groups spread three to a node; a node killed with SIGKILL
// is replaced in every group that named it, on the node the group did
// not have, while the SDK writes on; back, it lets its old members go
// and takes its share again; `cluster move` moves a table's group by
// hand; and `cluster decommission` drains a node of every group before
// it leaves, so every table ends on the three nodes left. Every write
// acknowledged is read back through every node at each step.
func TestClusterPlacement(t *testing.T) {
	c := startProcCluster(t, 4, "--dead-after", "3s", "--placement-interval", "200ms")
	ctx := context.Background()
	c.leader()
	tables := []string{"alpha", "bravo", "charlie", "delta"}
	for _, tb := range tables {
		if _, err := c.client(0, tb).CreateTable(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	acked := map[string]int{}
	n := 0
	write := func(node, k int) {
		t.Helper()
		for range k {
			tb := tables[n%len(tables)]
			rk := fmt.Sprintf("r%04d", n)
			if _, err := c.client(node, tb).UpsertEntity(ctx, entityJSON("p", rk, n), nil); err != nil {
				t.Fatalf("upsert %s/%s through node %d: %v", tb, rk, node+1, err)
			}
			acked[tb+"/"+rk] = n
			n++
		}
	}
	check := func(when string) {
		t.Helper()
		for node, p := range c.procs {
			if p == nil {
				continue
			}
			for k, v := range acked {
				tb, rk, _ := strings.Cut(k, "/")
				resp, err := c.client(node, tb).GetEntity(ctx, "p", rk, nil)
				if err != nil || !bytes.Contains(resp.Value, []byte(fmt.Sprintf(`"N":%d`, v))) {
					t.Fatalf("%s: acknowledged %s through node %d: %v", when, k, node+1, err)
				}
			}
		}
	}
	write(0, 40)
	c.waitRanges(tables, 30*time.Second, "three nodes each, spread evenly", func(rs map[string]cluster.RangeStatus) bool {
		load := map[uint64]int{}
		for _, r := range rs {
			if !settled(r) {
				return false
			}
			for _, m := range r.Members {
				load[m]++
			}
		}
		return load[1] == 3 && load[2] == 3 && load[3] == 3 && load[4] == 3
	})
	check("spread")

	// A node dies: every group naming it moves to the node it lacked.
	victim := 1 // node 2
	c.procs[victim].cmd.Process.Signal(syscall.SIGKILL)
	<-c.procs[victim].exited
	c.procs[victim] = nil
	write(0, 20)
	c.waitRanges(tables, 60*time.Second, "node 2 replaced", eachRange(func(r cluster.RangeStatus) bool {
		return settled(r) && !slices.Contains(r.Members, 2)
	}))
	write(2, 20)
	check("node 2 replaced")

	// Back, it holds none of its old members, and takes its share again.
	c.start(victim, testSecret)
	c.waitRanges(tables, 60*time.Second, "node 2 back in the spread", func(rs map[string]cluster.RangeStatus) bool {
		back := 0
		for _, r := range rs {
			if !settled(r) {
				return false
			}
			if slices.Contains(r.Members, 2) {
				back++
			}
		}
		return back >= 2
	})
	write(1, 20)
	check("node 2 back")

	// An operator moves alpha's group to nodes 1, 2 and 3.
	var out, errOut bytes.Buffer
	if code := run([]string{"cluster", "move", "--node", c.nodeAddrs[3], "--table", "alpha", "--voters", "1,2,3", "--timeout", "60s",
		"--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		t.Fatalf("cluster move: %d %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "on nodes 1,2,3") {
		t.Fatalf("cluster move said: %s", out.String())
	}

	// Node 4 is decommissioned: drained of its groups first, then removed.
	out.Reset()
	if code := run([]string{"cluster", "decommission", "--node", c.nodeAddrs[0], "--id", "4", "--drain-timeout", "60s",
		"--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		t.Fatalf("decommission: %d %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "node 4 drained") {
		t.Fatalf("decommission said: %s", out.String())
	}
	if code := c.procs[3].wait(t); code != 0 {
		t.Fatalf("the removed node exited %d: %s", code, c.procs[3].stderr)
	}
	c.procs[3] = nil
	c.waitRanges(tables, 10*time.Second, "nodes 1, 2 and 3", eachRange(func(r cluster.RangeStatus) bool {
		return settled(r) && slices.Equal(slices.Sorted(slices.Values(r.Members)), []uint64{1, 2, 3})
	}))
	write(0, 20)
	check("node 4 decommissioned")
}
