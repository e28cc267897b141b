package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/tabuladb/tabula/cluster"
)

// clusterRanges gathers every node's ranges, each from its leaseholder.
func (c *procCluster) clusterRanges() []cluster.RangeStatus {
	c.t.Helper()
	var out []cluster.RangeStatus
	for i, a := range c.nodeAddrs {
		if c.procs[i] == nil {
			continue
		}
		st, err := fetchStatus(a, uint64(i+1), []byte(testSecret))
		if err != nil {
			c.t.Fatalf("status of node %d: %v", i+1, err)
		}
		out = append(out, st.Ranges...)
	}
	return out
}

// TestClusterRangeGroups runs three real nodes with range groups. Two
// tables each get a raft group of three replicas, which `cluster status`
// shows with their leaseholders; the SDK writes and reads through every
// node. The node that holds a table's lease is killed with SIGKILL under
// the writes: the table's group elects another and the writes go on; the
// node restarts and catches up from its logs. A fourth node, in no
// table's group, answers for both tables by forwarding, and a table
// created then gets a group of its own; an operator moves a table's
// lease through a node that holds no replica of it. Nothing acknowledged
// is lost. The placement controller is off, so that the fourth node stays
// in no group (TestClusterPlacement has it on).
func TestClusterRangeGroups(t *testing.T) {
	c := startProcCluster(t, 3, "--placement-interval", "0")
	ctx := context.Background()
	c.leader()
	tables := []string{"alpha", "beta"}
	for _, tb := range tables {
		if _, err := c.client(1, tb).CreateTable(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	acked := map[string]int{}
	write := func(node, i int) {
		tb := tables[i%2]
		rk := fmt.Sprintf("r%04d", i)
		if _, err := c.client(node, tb).UpsertEntity(ctx, entityJSON("p", rk, i), nil); err != nil {
			t.Fatalf("upsert %s/%s through node %d: %v\n%s", tb, rk, node+1, err, c.procs[node].stderr)
		}
		acked[tb+"/"+rk] = i
	}
	for i := range 40 {
		write(i%3, i)
	}

	ranges := c.clusterRanges()
	groups := map[string]cluster.RangeStatus{}
	for _, r := range ranges {
		groups[r.Table] = r
	}
	for _, tb := range tables {
		r, ok := groups[tb]
		if !ok || r.Group <= 1 || !slices.Equal(slices.Sorted(slices.Values(r.Replicas)), []uint64{1, 2, 3}) || r.Entities != 20 {
			t.Fatalf("table %s: range %+v (all: %+v)", tb, r, ranges)
		}
	}
	if groups["alpha"].Group == groups["beta"].Group {
		t.Fatalf("both tables in group %d", groups["alpha"].Group)
	}

	// Kill alpha's leaseholder; its group elects another.
	holder := int(groups["alpha"].Leaseholder) - 1
	c.procs[holder].cmd.Process.Signal(syscall.SIGKILL)
	<-c.procs[holder].exited
	c.procs[holder] = nil
	for i := 40; i < 80; i++ {
		write((holder+1+i%2)%3, i)
	}
	c.start(holder, testSecret)
	for i := 80; i < 100; i++ {
		write(holder, i)
	}
	check := func(node int) {
		t.Helper()
		for k, n := range acked {
			tb, rk, _ := strings.Cut(k, "/")
			resp, err := c.client(node, tb).GetEntity(ctx, "p", rk, nil)
			if err != nil {
				for i, p := range c.procs {
					if p != nil {
						t.Logf("node %d:\n%s", i+1, p.stderr)
					}
				}
				t.Fatalf("acknowledged %s through node %d: %v", k, node+1, err)
			}
			if !bytes.Contains(resp.Value, []byte(fmt.Sprintf(`"N":%d`, n))) {
				t.Fatalf("acknowledged %s through node %d: %s, want N=%d", k, node+1, resp.Value, n)
			}
		}
	}
	check(holder)

	// A fourth node hosts no group of the two tables, and answers for
	// them by forwarding.
	extra := freeAddrs(t, 2)
	c.nodeAddrs = append(c.nodeAddrs, extra[0])
	c.restAddrs = append(c.restAddrs, extra[1])
	c.dirs = append(c.dirs, filepath.Join(t.TempDir(), "n4"))
	c.procs = append(c.procs, nil)
	c.start(3, testSecret)
	for i := 100; i < 110; i++ {
		write(3, i)
	}
	check(3)
	if _, err := c.client(3, "gamma").CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(3, "gamma").AddEntity(ctx, entityJSON("p", "first", 1), nil); err != nil {
		t.Fatal(err)
	}
	var gamma *cluster.RangeStatus
	for deadline := time.Now().Add(10 * time.Second); gamma == nil; time.Sleep(50 * time.Millisecond) {
		for _, r := range c.clusterRanges() {
			if r.Table == "gamma" {
				gamma = &r
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leaseholder reports table gamma")
		}
	}
	if gamma.Group <= groups["beta"].Group || len(gamma.Replicas) != 3 {
		t.Fatalf("gamma: %+v", gamma)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"cluster", "status", "--node", c.nodeAddrs[3], "--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		t.Fatalf("cluster status: %d %s", code, errOut.String())
	}
	for _, tb := range []string{"alpha", "beta", "gamma"} {
		if !strings.Contains(out.String(), "devstoreaccount1/"+tb) {
			t.Errorf("cluster status lacks table %s:\n%s", tb, out.String())
		}
	}
	// beta's lease moves, asked of the fourth node, which holds no
	// replica of beta's group (it sends the operator to one that does).
	leaseholder := func(table string) uint64 {
		for _, r := range c.clusterRanges() {
			if r.Table == table {
				return r.Leaseholder
			}
		}
		return 0
	}
	target := leaseholder("beta")%3 + 1
	out.Reset()
	if code := run([]string{"cluster", "transfer-lease", "--node", c.nodeAddrs[3], "--table", "beta", "--to", fmt.Sprint(target), "--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		for i, p := range c.procs {
			t.Logf("node %d:\n%s", i+1, p.stderr)
		}
		t.Fatalf("transfer-lease: %d %s", code, errOut.String())
	}
	for deadline := time.Now().Add(10 * time.Second); leaseholder("beta") != target; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("beta's lease is with node %d, want %d", leaseholder("beta"), target)
		}
	}
	for i := 110; i < 116; i++ {
		write(3, i)
	}
	check(0)
	if code := run([]string{"cluster", "transfer-lease", "--node", c.nodeAddrs[0], "--table", "beta", "--to", "4", "--cluster-secret", testSecret}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "not a voter") {
		t.Fatalf("a lease to a node outside beta's group: %d %s", code, errOut.String())
	}
	// A write to a missing table is still the service's answer.
	_, err := c.client(3, "missing").AddEntity(ctx, entityJSON("p", "r", 1), nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.ErrorCode != "TableNotFound" {
		t.Fatalf("insert into a missing table: %v", err)
	}
}
