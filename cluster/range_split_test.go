package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/partition"
)

// splitVia splits a table's range at key through the system group's
// leader.
func (c *testCluster) splitVia(table, at string) {
	c.t.Helper()
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.n.SplitTable(context.Background(), acct, table, at)
	}); err != nil {
		c.t.Fatalf("split %s at %q: %v", table, at, err)
	}
}

// waitSplit waits until every running node records table's ranges as
// starting at starts, and every range's group has a ready leader whose
// span is its range; it returns the ranges.
func (c *testCluster) waitSplit(table string, starts []string, timeout time.Duration) []partition.TableGroup {
	c.t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		ranges, ok := c.splitDone(table, starts)
		if ok {
			return ranges
		}
		last = fmt.Sprint(ranges)
		if time.Now().After(deadline) {
			c.t.Fatalf("table %s did not split at %q in %v: %s\n%s", table, starts, timeout, last, c.describeGroups())
		}
	}
}

func (c *testCluster) splitDone(table string, starts []string) ([]partition.TableGroup, bool) {
	var ranges []partition.TableGroup
	for _, tn := range c.nodes {
		rs, err := tn.node.st().TableRanges(acct, table)
		if err != nil || len(rs) != len(starts) {
			return rs, false
		}
		for i, r := range rs {
			if r.Group.Start != starts[i] {
				return rs, false
			}
		}
		ranges = rs
	}
	for _, tg := range ranges {
		ld := (*testNode)(nil)
		for _, tn := range c.nodes {
			if r := tn.node.testGroup(tg.Group.ID); r != nil && r.holdsLease() {
				ld = tn
			}
		}
		if ld == nil {
			return ranges, false
		}
		if sp, ok, err := ld.node.st().GroupSpan(tg.Group.ID); err != nil || !ok || sp != tg.Span() {
			return ranges, false
		}
	}
	return ranges, true
}

// walkQuery reads a whole query page by page through any node, as an SDK
// follows continuations, and returns the PartitionKey/RowKey of every
// entity in order.
func walkQuery(c *testCluster, table string, q partition.EntityQuery) []string {
	c.t.Helper()
	keys, _ := walkQueryTraced(c, table, q)
	return keys
}

// walkQueryTraced is walkQuery, also saying which node answered each
// page, with what.
func walkQueryTraced(c *testCluster, table string, q partition.EntityQuery) (keys []string, trace string) {
	c.t.Helper()
	for range 1000 {
		type page struct {
			keys []string
			cont partition.Continuation
			node uint64
		}
		p, err := retryAny(c, func(s *Store) (page, error) {
			p := page{node: s.n.cfg.ID}
			cont, err := s.QueryEntities(context.Background(), acct, table, q, func(e *partition.StoredEntity) error {
				p.keys = append(p.keys, e.PartitionKey+"/"+e.RowKey)
				return nil
			})
			p.cont = cont
			return p, err
		})
		if err != nil {
			c.t.Fatalf("query %+v: %v", q, err)
		}
		start, _ := partition.QueryStart(q)
		trace += fmt.Sprintf("page from %q by node %d: %v\n", start, p.node, p.keys)
		keys = append(keys, p.keys...)
		if p.cont.IsZero() {
			return keys, trace
		}
		q.NextPartitionKey, q.NextRowKey = p.cont.NextPartitionKey, p.cont.NextRowKey
	}
	c.t.Fatal("a query walk did not end in 1000 pages")
	return nil, ""
}

// TestRangeGroupSplits splits a table's range twice under writes: the
// catalog of every node records the ranges; each range's group holds its
// span, with a leader; the middle range's group moves to the node the
// others lack, so no node holds every range; writes and reads reach the
// range that holds their key; a query walks across the ranges with
// continuations, every entity once and in order; a restart of the whole
// cluster keeps it all; and the table's drop takes every range's group
// with it.
func TestRangeGroupSplits(t *testing.T) {
	// The placement controller is off: the test moves the groups itself.
	c := &testCluster{t: t, net: newSimNet(61), nodes: map[uint64]*testNode{}, rangeGroups: true, placementInterval: -1}
	c.startAll(4)
	createVia(c, "halves")
	want := map[string]int{}
	write := func(pk string, n int) {
		t.Helper()
		upsertVia(c, "halves", pk, "r", n)
		want[pk] = n
	}
	for i := range 40 {
		write(fmt.Sprintf("p%02d", i), i)
	}
	parent := c.tableGroup("halves").ID
	c.splitVia("halves", "p20")
	for i := range 10 {
		write(fmt.Sprintf("p%02d", i*4), 100+i) // both halves while it splits
	}
	ranges := c.waitSplit("halves", []string{"", "p20"}, 20*time.Second)
	if ranges[0].Group.ID != parent || ranges[1].Group.ID <= parent || ranges[1].End != "" {
		t.Fatalf("ranges after the split: %+v", ranges)
	}
	c.splitVia("halves", "p30")
	ranges = c.waitSplit("halves", []string{"", "p20", "p30"}, 20*time.Second)
	// The middle range moves: one of its nodes gives way to the fourth.
	middle := ranges[1].Group
	var outside uint64
	for _, id := range c.peers {
		if !middle.Has(id) {
			outside = id
		}
	}
	moved := append(slices.Clone(middle.Voters[1:]), outside)
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.n.SetGroupVoters(context.Background(), middle.ID, moved)
	}); err != nil {
		t.Fatal(err)
	}
	c.waitMembers(middle.ID, moved, 20*time.Second)
	ranges = c.waitSplit("halves", []string{"", "p20", "p30"}, 20*time.Second)
	for i := 40; i < 50; i++ {
		write(fmt.Sprintf("p%02d", i), i)
	}
	check := func(when string) {
		t.Helper()
		for pk, n := range want {
			e, err := readVia(c, "halves", pk, "r")
			if err != nil || entityN(t, e) != n {
				t.Fatalf("%s: %s = %+v, %v; want N=%d", when, pk, e, err, n)
			}
		}
		var keys []string
		for pk := range want {
			keys = append(keys, pk+"/r")
		}
		slices.Sort(keys)
		if got := walkQuery(c, "halves", partition.EntityQuery{Top: 7}); !slices.Equal(got, keys) {
			t.Fatalf("%s: a query walk read\n%v\nwant\n%v", when, got, keys)
		}
		if got := walkQuery(c, "halves", partition.EntityQuery{Filter: "PartitionKey ge 'p25' and PartitionKey lt 'p35'"}); len(got) != 10 || got[0] != "p25/r" {
			t.Fatalf("%s: a filtered walk across a boundary read %v", when, got)
		}
		// Each range's entities are where its group is, and in no other
		// group's span.
		for _, tg := range ranges {
			c.convergeMembers(tg.Group.ID, tg.Group.Voters, 10*time.Second)
		}
	}
	// A router that has not seen the split sends a write of the child's
	// key to the parent: every replica of the parent refuses it alike,
	// and the key keeps its value.
	ld := c.groupLeader(ranges[0].Group.ID, 10*time.Second)
	if _, err := ld.node.applyInGroup(context.Background(), ranges[0].Group.ID, acct, "halves", opUpsert("p33", "r", -1)); !isBusy(err) {
		t.Fatalf("a write of the child's key through the parent: %v, want ServerBusy", err)
	}
	// A catalog command in a range group's log, and a span's split in
	// the system group's, change nothing anywhere.
	for _, c2 := range []struct {
		r   *replica
		cmd *command.Command
	}{
		{ld.node.testGroup(ranges[0].Group.ID), &command.Command{Kind: command.KindCreateTable, Account: acct, Table: "sneaky"}},
		{c.leader(10 * time.Second).node.replica, &command.Command{Kind: command.KindSplitGroup, Account: acct, Table: "halves",
			Group: 999, Key: "p10", Voters: []uint64{1}}},
	} {
		if _, err := c2.r.propose(context.Background(), c2.cmd, 0); !isBusy(err) {
			t.Fatalf("a %s command in group %d's log: %v, want ServerBusy", c2.cmd.Kind, c2.r.group, err)
		}
	}
	c.converge(10 * time.Second)
	for _, tn := range c.nodes {
		if _, err := tn.node.st().GetTable(context.Background(), acct, "sneaky"); err == nil {
			t.Fatalf("node %d: a range group's log created a table", tn.id)
		}
		if sp, _, _ := tn.node.st().GroupSpan(ranges[0].Group.ID); tn.node.testGroup(ranges[0].Group.ID) != nil && sp.HighPartitionKey != "p20" {
			t.Fatalf("node %d: the system group's log split a span: %+v", tn.id, sp)
		}
	}
	check("after the splits")
	c.restartAll()
	c.waitSplit("halves", []string{"", "p20", "p30"}, 20*time.Second)
	write("p05", 500)
	write("p35", 535)
	check("after a restart")

	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.DeleteTable(context.Background(), acct, "halves")
	}); err != nil {
		t.Fatal(err)
	}
	c.converge(10 * time.Second)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left := 0
		for _, tn := range c.nodes {
			for _, tg := range ranges {
				if tn.node.testGroup(tg.Group.ID) != nil || !tn.logGroup(tg.Group.ID).Empty() {
					left++
				}
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the dropped table's range groups are still hosted or logged", left)
		}
	}
}

// TestSplitChildRetiresAnInheritedMember splits a range group one of
// whose members was added late (its raft id carries an index of the
// parent's log), then moves the child off that member while its node is
// cut off. Once healed, the node learns the member was removed and lets
// it go: the child's log continues the parent's numbering, so its
// replicas have seen past the inherited member's addition. A child log
// restarting at index 1 left such a member a zombie (the chaos run's
// seed 9). A member the child adds later gets an id above every
// inherited one.
func TestSplitChildRetiresAnInheritedMember(t *testing.T) {
	c := newTablesCluster(t, 4, 43)
	createVia(c, "inherit")
	g := c.tableGroup("inherit")
	ld := c.groupLeader(g.ID, 10*time.Second)
	var late, away uint64 // the node that joins the group late, and the one it replaces
	for _, tn := range c.nodes {
		switch {
		case !g.Has(tn.id):
			late = tn.id
		case tn.id != ld.id && away == 0:
			away = tn.id
		}
	}
	// Enough entries that the late member's incarnation is far past any
	// index a child log restarting at 1 would reach in this test.
	for i := range 40 {
		upsertVia(c, "inherit", fmt.Sprintf("p%d", i%10), fmt.Sprintf("r%d", i), i)
	}
	voters := []uint64{ld.id, late}
	for _, v := range g.Voters {
		if v != ld.id && v != away {
			voters = append(voters, v)
		}
	}
	c.setVoters("inherit", voters...)
	c.waitMembers(g.ID, voters, 20*time.Second)
	lateID := c.nodes[late].node.testGroup(g.ID).id
	if transport.Incarnation(lateID) < 40 {
		t.Fatalf("the late member's raft id %x does not carry its addition's index", lateID)
	}

	c.splitVia("inherit", "p5")
	ranges := c.waitSplit("inherit", []string{"", "p5"}, 20*time.Second)
	child := ranges[1].Group.ID
	c.waitMembers(child, voters, 20*time.Second)
	r := c.nodes[late].node.testGroup(child)
	if r.id != lateID {
		t.Fatalf("the child's member on node %d is %x, its parent's %x", late, r.id, lateID)
	}
	// A node whose replica of the parent had not started when its
	// catalog named it for the child starts the child empty, awaiting a
	// snapshot (its log then starts at 1 for a moment); once it has
	// entries, they continue the parent's numbering.
	for deadline := time.Now().Add(10 * time.Second); ; {
		first, err := r.rlog.FirstIndex()
		if err == nil && first > transport.Incarnation(lateID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child's log starts at %d (%v), before the late member's addition at %d", first, err, transport.Incarnation(lateID))
		}
		time.Sleep(5 * time.Millisecond)
	}

	var rest []uint64
	for _, tn := range c.nodes {
		if tn.id != late {
			rest = append(rest, tn.id)
		}
	}
	c.net.partition([]uint64{late}, rest)
	moved := []uint64{ld.id, away}
	for _, v := range voters {
		if v != ld.id && v != late {
			moved = append(moved, v)
		}
	}
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		if s.n.cfg.ID == late {
			return struct{}{}, errBusy("cut off")
		}
		return struct{}{}, s.n.SetGroupVoters(context.Background(), child, moved)
	}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var cs *raftpb.ConfState
		for _, tn := range c.nodes {
			if r := tn.node.testGroup(child); r != nil && r.holdsLease() && tn.id != late {
				cs = r.confState()
			}
		}
		if got := slices.Sorted(slices.Values(nodesOf(cs.GetVoters()))); cs != nil && slices.Equal(got, slices.Sorted(slices.Values(moved))) && len(cs.GetLearners()) == 0 {
			for _, id := range cs.GetVoters() {
				if transport.NodeOf(id) == away && transport.Incarnation(id) <= transport.Incarnation(lateID) {
					t.Fatalf("the child re-added node %d as %x, not above the inherited %x", away, id, lateID)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child did not move to %v: %v", moved, cs)
		}
	}
	c.net.heal()
	c.waitRetiredSpan(late, child, ranges[1].Span(), 20*time.Second)
	c.waitMembers(child, moved, 10*time.Second)
	c.waitMembers(g.ID, voters, 10*time.Second)
	for i := range 40 {
		if e, err := readVia(c, "inherit", fmt.Sprintf("p%d", i%10), fmt.Sprintf("r%d", i)); err != nil || entityN(t, e) != i {
			t.Fatalf("p%d/r%d after the moves: %v", i%10, i, err)
		}
	}
}

// describeGroups tells, for a failing test, what each node hosts and what
// its store records of every range group's span: enough to see a group
// that no node leads, or one whose span nobody takes.
func (c *testCluster) describeGroups() string {
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(c.nodes)) {
		n := c.nodes[id].node
		fmt.Fprintf(&b, "node %d (system applied %d):", id, n.applied.Load())
		for _, g := range n.groupStatus() {
			r := n.group(g.Group)
			fmt.Fprintf(&b, " [group %d leader %d applied %d voters %v learners %v ready %v quiesced %v",
				g.Group, g.Leader, g.Applied, g.Voters, g.Learners, r != nil && r.ready.Load(), r != nil && r.quiesced.Load())
			if sp, ok, err := n.st().GroupSpan(g.Group); err == nil && ok {
				frozen, _ := n.st().GroupFrozen(g.Group)
				fmt.Fprintf(&b, " span [%q, %q) frozen %v", sp.LowPartitionKey, sp.HighPartitionKey, frozen)
			}
			b.WriteString("]")
		}
		if out, err := n.st().OutsideCatalog(); err == nil && len(out) > 0 {
			fmt.Fprintf(&b, " outside the catalog: %+v", out)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestSnapshotPastASplitDropsTheChildsKeys: a member that hears nothing
// of its range group while the group splits, nor of the child, takes the
// parent's snapshot made past the split (the leader's log compacted past
// it), and with it the parent's new span only. The keys of the child's
// span it held go with the ingest, since no group of its node holds them
// (partition.Store.IngestSpan); the child, once heard, brings them back
// from its leader.
func TestSnapshotPastASplitDropsTheChildsKeys(t *testing.T) {
	c, want := newPairsCluster(t, 75)
	parent := c.tableGroup("pairs")
	ld := c.groupLeader(parent.ID, 10*time.Second)
	var lagging uint64
	for _, v := range parent.Voters {
		if v != ld.id {
			lagging = v
		}
	}
	childSpan := partition.Span{Account: acct, Table: "pairs", LowPartitionKey: "p20"}
	held := func() int {
		return strings.Count(dumpSpan(t, c.nodes[lagging].node.st(), childSpan), "\n")
	}
	for deadline := time.Now().Add(10 * time.Second); held() < 20; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node %d applied %d of the 20 writes past p20", lagging, held())
		}
	}
	installed := func() int { return c.nodes[lagging].node.Status().SpanSnapshotsInstalled }
	before := installed()
	c.net.deafenRanges(lagging)
	c.splitVia("pairs", "p20")
	child := c.waitSplit("pairs", []string{"", "p20"}, 20*time.Second)[1].Group
	// Past the log's retention and a sync: the leader's log no longer
	// holds the split.
	for i := range 4 * int(c.nodes[ld.id].node.cfg.SyncEvery) {
		pk := fmt.Sprintf("p%02d", i%20)
		upsertVia(c, "pairs", pk, "r", 100+i)
		want[pk] = 100 + i
	}
	c.net.hear(lagging, parent.ID)
	c.waitRetiredSpan(lagging, child.ID, childSpan, 20*time.Second)
	// The store's ingest drops the keys before the loop counts the
	// install done.
	for deadline := time.Now().Add(10 * time.Second); installed() == before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node %d caught up with no span snapshot", lagging)
		}
	}
	c.net.hear(lagging, child.ID)
	c.waitMembers(child.ID, child.Voters, 20*time.Second)
	c.checkPairs("pairs", want, "after the lagging member caught up")
}
