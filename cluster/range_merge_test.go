package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
)

// mergeVia merges the range of table that starts at at into the one
// before it, through the system group's leader.
func (c *testCluster) mergeVia(table, at string) {
	c.t.Helper()
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.n.MergeTable(context.Background(), acct, table, at)
	}); err != nil {
		c.t.Fatalf("merge %s at %q: %v", table, at, err)
	}
}

// waitMerged waits until table's ranges start at starts on every node,
// every range's group has a ready leader whose span is its range, and
// the merged group is neither hosted nor logged on any node.
func (c *testCluster) waitMerged(table string, starts []string, merged uint64, timeout time.Duration) []partition.TableGroup {
	c.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		ranges, ok := c.splitDone(table, starts)
		var left []uint64
		for _, tn := range c.nodes {
			if tn.node.group(merged) != nil || !tn.rlog.Group(merged).Empty() {
				left = append(left, tn.id)
			}
		}
		if ok && len(left) == 0 {
			return ranges
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("table %s did not merge to %q in %v: ranges %v; group %d still on %v", table, starts, timeout, ranges, merged, left)
		}
	}
}

// TestRangeGroupMerges merges a table's ranges back under writes. First
// two ranges whose groups are on the same nodes: the catalog gives the
// right range's keys to the left group, the right group freezes, and the
// left one takes its span; the right group's raft log is gone from every
// node, every write acknowledged is read where it was, and a query walks
// the merged range. Then a range whose group is on other nodes than the
// left one's: the left group's member that does not hold the frozen
// group is removed, the merge goes on without it, and the member comes
// back with the merged span from a snapshot; the node outside the left
// group drops its frozen member of the right one, data and all. A
// restart of the whole cluster keeps it all.
func TestRangeGroupMerges(t *testing.T) {
	c := &testCluster{t: t, net: newSimNet(71), nodes: map[uint64]*testNode{}, rangeGroups: true, placementInterval: -1}
	c.startAll(4)
	createVia(c, "pairs")
	var mu sync.Mutex
	want := map[string]int{}
	write := func(pk string, n int) {
		t.Helper()
		upsertVia(c, "pairs", pk, "r", n)
		mu.Lock()
		want[pk] = n
		mu.Unlock()
	}
	for i := range 40 {
		write(fmt.Sprintf("p%02d", i), i)
	}
	left := c.tableGroup("pairs")
	c.splitVia("pairs", "p20")
	ranges := c.waitSplit("pairs", []string{"", "p20"}, 20*time.Second)
	right := ranges[1].Group.ID
	for i := 15; i < 25; i++ {
		write(fmt.Sprintf("p%02d", i), 100+i)
	}

	// Writes to both halves go on through the merge.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			write(fmt.Sprintf("p%02d", (i*7)%40), 1000+i)
		}
	}()
	c.mergeVia("pairs", "p20")
	ranges = c.waitMerged("pairs", []string{""}, right, 20*time.Second)
	close(stop)
	wg.Wait()
	if ranges[0].Group.ID != left.ID {
		t.Fatalf("the merged range's group is %d, want the left one's, %d", ranges[0].Group.ID, left.ID)
	}
	check := func(when string) {
		t.Helper()
		var keys []string
		for pk, n := range want {
			e, err := readVia(c, "pairs", pk, "r")
			if err != nil || entityN(t, e) != n {
				t.Fatalf("%s: %s = %+v, %v; want N=%d", when, pk, e, err, n)
			}
			keys = append(keys, pk+"/r")
		}
		slices.Sort(keys)
		if got := walkQuery(c, "pairs", partition.EntityQuery{Top: 7}); !slices.Equal(got, keys) {
			t.Fatalf("%s: a query walk read\n%v\nwant\n%v", when, got, keys)
		}
	}
	check("after the first merge")
	c.convergeMembers(left.ID, left.Voters, 10*time.Second)

	// A range whose group moves to the node the left group lacks.
	c.splitVia("pairs", "p30")
	ranges = c.waitSplit("pairs", []string{"", "p30"}, 20*time.Second)
	right = ranges[1].Group.ID
	var outside, gone uint64
	for _, id := range c.peers {
		if !left.Has(id) {
			outside = id
		}
	}
	ld := c.groupLeader(left.ID, 10*time.Second)
	for _, v := range left.Voters {
		if v != ld.id {
			gone = v // the left group's member without the right group
		}
	}
	moved := []uint64{outside}
	for _, v := range left.Voters {
		if v != gone {
			moved = append(moved, v)
		}
	}
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.n.SetGroupVoters(context.Background(), right, moved)
	}); err != nil {
		t.Fatal(err)
	}
	c.waitMembers(right, moved, 20*time.Second)
	write("p35", 35)
	write("p05", 5)
	c.mergeVia("pairs", "p30")
	// The node outside the left group drops its frozen member of the
	// right one, and its data: no group of it takes them.
	ranges = c.waitMerged("pairs", []string{""}, right, 30*time.Second)
	c.waitRetiredSpan(outside, right, partition.Span{Account: acct, Table: "pairs", LowPartitionKey: "p30"}, 10*time.Second)
	c.waitMembers(left.ID, left.Voters, 20*time.Second)
	write("p36", 36)
	check("after a merge without one member")
	if sp, ok, err := c.nodes[gone].node.st().GroupSpan(left.ID); err != nil || !ok || sp != ranges[0].Span() {
		t.Fatalf("node %d, back in the left group, holds its span as %+v, %v, %v; want %+v", gone, sp, ok, err, ranges[0].Span())
	}

	c.restartAll()
	c.waitSplit("pairs", []string{""}, 20*time.Second)
	write("p25", 2500)
	check("after a restart")
}
