package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/cluster/raftlog"
	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// waitUnloaded waits until every range replica of every node but slack
// of them is unloaded, and their raft logs hold only the states of those
// still loaded in memory (the lease balancer loads a dormant leader now
// and then to hand its lease over).
func (c *testCluster) waitUnloaded(slack int, timeout time.Duration) {
	c.t.Helper()
	want := len(c.groups) - slack
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		done := true
		for _, tn := range c.nodes {
			// The system group's state stays loaded.
			st := tn.node.Status()
			done = done && st.Unloaded >= want && tn.rlog.LoadedGroups() <= 1+len(c.groups)-st.Unloaded
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			for _, tn := range c.nodes {
				c.t.Logf("node %d: %d of %d replicas unloaded, %d raft log states loaded; kept by: %v", tn.id, tn.node.Status().Unloaded, want,
					tn.rlog.LoadedGroups(), tn.node.unloadBlockers())
			}
			c.t.Fatalf("range replicas not all unloaded after %v", timeout)
		}
	}
}

// TestUnloadedReplicasLoad: idle groups' replicas, leaders too, leave
// memory, raft log state and all; the next read or write loads and wakes
// them, the leader elected again at once, and it sees what was written
// before and stamps above it; a node whose unloaded leaders die has its
// groups elect others, and a restarted node's replicas unload again.
func TestUnloadedReplicasLoad(t *testing.T) {
	c := prepareRangeCluster(t, 3, 21, 6, 0, func(tn *testNode) { tn.node.unloadTicks = 3 * tn.node.cfg.ElectionTicks })
	c.createRangesTable()
	want := map[string]int{}
	first := map[uint64]int64{}
	for _, g := range c.groups {
		e := c.writeInGroup(g, fmt.Sprintf("g%d", g), "first", int(g))
		first[g] = int64(e.Timestamp)
		want[fmt.Sprintf("g%d/first", g)] = int(g)
	}
	c.waitStores(want, 10*time.Second)
	c.waitUnloaded(0, 20*time.Second)
	for _, tn := range c.nodes {
		// The status reads the records, and loads nothing. (These
		// groups have no table, so no descriptor names their voters.)
		gs := tn.node.groupStatus()
		if len(gs) != len(c.groups) {
			t.Fatalf("node %d lists %d groups, want %d", tn.id, len(gs), len(c.groups))
		}
		for _, g := range gs {
			if !g.Unloaded || g.Leader == 0 || g.Applied == 0 {
				t.Fatalf("node %d lists an unloaded group as %+v", tn.id, g)
			}
		}
		if st := tn.node.Status(); st.Unloaded != len(c.groups) {
			t.Fatalf("node %d: %d replicas unloaded after its status, want %d", tn.id, st.Unloaded, len(c.groups))
		}
	}
	var loads uint64
	for _, tn := range c.nodes {
		loads += tn.node.Status().ReplicaLoads
	}
	// Half the groups are loaded by a read, half by a write over the
	// first entity, which must be stamped above the write before.
	for i, g := range c.groups {
		if i%2 == 0 {
			if got := entityN(t, c.readInGroup(g, fmt.Sprintf("g%d", g), "first")); got != int(g) {
				t.Fatalf("group %d: read %d after loading, want %d", g, got, g)
			}
			continue
		}
		e := c.writeInGroup(g, fmt.Sprintf("g%d", g), "first", int(g)+100)
		want[fmt.Sprintf("g%d/first", g)] = int(g) + 100
		if ts := int64(e.Timestamp); ts <= first[g] {
			t.Fatalf("group %d: the write after loading is stamped %d, not above the one before (%d)", g, ts, first[g])
		}
	}
	var loaded uint64
	for _, tn := range c.nodes {
		loaded += tn.node.Status().ReplicaLoads
	}
	if loaded < loads+uint64(len(c.groups)) {
		t.Fatalf("replica loads %d before the requests, %d after: want one a group at least", loads, loaded)
	}
	c.waitStores(want, 10*time.Second)
	c.waitUnloaded(0, 20*time.Second)
	// Loaded again, a replica has applied what it had: the groups woken
	// by a read end with the empty entry of their leader's election,
	// which the store's applied index does not count.
	for _, tn := range c.nodes {
		for _, g := range c.groups {
			u, _ := tn.node.unloadedReplica(g)
			r := tn.node.testGroup(g)
			if r == nil {
				t.Fatalf("node %d, group %d: not loaded again", tn.id, g)
			}
			if r.applied.Load() != u.applied || r.leader.Load() != u.leader {
				t.Fatalf("node %d, group %d: loaded again at applied %d, leader %d; unloaded at %d, leader %d", tn.id, g, r.applied.Load(), r.leader.Load(), u.applied, u.leader)
			}
		}
	}

	// The leaders die unloaded: their groups' followers, loaded by the
	// liveness change, elect others.
	victim, led := c.busiestLeader()
	disk := c.crash(victim, nil)
	for _, g := range led {
		c.writeInGroup(g, fmt.Sprintf("g%d", g), "second", int(g)+200)
		want[fmt.Sprintf("g%d/second", g)] = int(g) + 200
		if ld := c.groupLeader(g, time.Second); ld.id == victim {
			t.Fatalf("group %d is led by the dead node", g)
		}
	}
	c.start(victim, disk)
	c.converge(20 * time.Second)
	c.waitStores(want, 20*time.Second)
	c.waitUnloaded(0, 30*time.Second)
}

// testGroup is group for tests: a replica unloaded is loaded again first
// (nil if the node hosts none, or its loop does not answer in time).
func (n *Node) testGroup(id uint64) *replica {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.groupLoaded(ctx, id)
}

// quiescedHere says whether the node's replica of group g is quiesced,
// or unloaded (which it is not for).
func (n *Node) quiescedHere(g uint64) bool {
	if r := n.group(g); r != nil {
		return r.quiesced.Load()
	}
	_, unloaded := n.unloadedReplica(g)
	return unloaded
}

// unloadBlockers counts, on the node's loop, what keeps its loaded range
// replicas from being unloaded.
func (n *Node) unloadBlockers() map[string]int {
	out := make(chan map[string]int, 1)
	select {
	case n.calls <- func() {
		m := map[string]int{}
		for _, r := range n.replicaList {
			if r.group != systemGroup {
				m[r.unloadBlocker()]++
			}
		}
		out <- m
	}:
	case <-n.stopped:
		return nil
	}
	return <-out
}

// TestRestartLeavesReplicasUnloaded: a node starts the replicas of groups
// at rest unloaded, raft log states and all, and nothing but warming
// (off here) loads them while the cluster stands idle, with no leader known in any group after a
// restart of the whole cluster, nor when a node dies and comes back; a
// read or a write loads them, elects a leader, and sees what was written
// before the restart.
func TestRestartLeavesReplicasUnloaded(t *testing.T) {
	c, tables := unloadingTablesCluster(t, 3, 23, 0)
	unloaded := func(tn *testNode) bool { return tn.node.allUnloaded(len(tables)) }
	c.waitAll("every replica unloaded", unloaded)
	c.restartAll()
	for _, tn := range c.nodes {
		if !unloaded(tn) {
			t.Fatalf("node %d started with %d of %d replicas unloaded, %d raft log states loaded", tn.id, tn.node.unloadedNow(), len(tables), tn.rlog.LoadedGroups())
		}
	}
	// The system group elects, the nodes hear each other, the balancer
	// and the placement controller look: none of it loads a replica.
	idle := 5 * time.Duration(c.nodes[1].node.cfg.ElectionTicks) * c.tickInterval()
	c.leader(10 * time.Second)
	time.Sleep(idle)
	for _, tn := range c.nodes {
		if loads := tn.node.replicaLoads.Load(); !unloaded(tn) || loads != 0 {
			t.Fatalf("node %d, idle since its start: %d of %d replicas unloaded, %d loaded again, %d raft log states loaded",
				tn.id, tn.node.unloadedNow(), len(tables), loads, tn.rlog.LoadedGroups())
		}
		for _, g := range tn.node.groupStatus() {
			if !g.Unloaded || g.Leader != 0 || g.Applied == 0 || len(g.Voters) != 3 {
				t.Fatalf("node %d lists a group unloaded since its start as %+v", tn.id, g)
			}
		}
	}
	// A node dies and comes back: its peers, which know no leader of
	// these groups to lose, load nothing; it starts them unloaded too.
	// A record left from before the crash, of a group the node no longer
	// hosts, is not this run's: the start clears it.
	disk := c.crash(3, nil)
	staleRecord(t, disk, 999_999)
	time.Sleep(idle)
	c.start(3, disk)
	if c.nodes[3].node.hostsGroup(999_999) {
		t.Fatal("a record left from the last run counts as a group hosted")
	}
	time.Sleep(idle)
	for _, tn := range c.nodes {
		if loads := tn.node.replicaLoads.Load(); !unloaded(tn) || loads != 0 {
			t.Fatalf("node %d, after node 3's restart: %d of %d replicas unloaded, %d loaded again, %d raft log states loaded",
				tn.id, tn.node.unloadedNow(), len(tables), loads, tn.rlog.LoadedGroups())
		}
	}
	for i, tb := range tables {
		if i%2 == 0 {
			upsertVia(c, tb, "p", "after", 10+i)
		}
		e, err := readVia(c, tb, "p", "before")
		if err != nil || entityN(t, e) != i {
			t.Fatalf("%s/before after the restart: %+v, %v; want N=%d", tb, e, err, i)
		}
	}
	for i, tb := range tables {
		if i%2 == 0 {
			if e, err := readVia(c, tb, "p", "after"); err != nil || entityN(t, e) != 10+i {
				t.Fatalf("%s/after: %+v, %v; want N=%d", tb, e, err, 10+i)
			}
		}
	}
	var loads uint64
	for _, tn := range c.nodes {
		loads += tn.node.replicaLoads.Load()
	}
	if loads < uint64(len(tables)) {
		t.Fatalf("%d replica loads after a request to each of %d groups", loads, len(tables))
	}
	c.waitAll("every replica unloaded again", unloaded)
}

// TestIdleVoterRestartLoadsNothing: a node that leads no group dies and
// comes back while the groups stand idle, each voter with its whole log:
// no node loads a replica, for its death (its peers still hear a quorum
// of every group) or for its return (it lacks no entry); it starts its
// own unloaded, and warms none (their leaders report their ranges).
func TestIdleVoterRestartLoadsNothing(t *testing.T) {
	// No lease balancing: every lease stays with the tables' creator.
	// Warming on: the node's groups' leaders report their ranges.
	c, tables := unloadingTablesCluster(t, 3, 24, -1)
	c.prepare = func(tn *testNode) { tn.node.unloadTicks = 3 * tn.node.cfg.ElectionTicks }
	c.waitAll("every replica unloaded", func(tn *testNode) bool { return tn.node.allUnloaded(len(tables)) })
	var victim uint64
	for id, tn := range c.nodes {
		leads := false
		for _, g := range tn.node.groupStatus() {
			leads = leads || g.Leader == id || g.Leader == 0
		}
		if !leads {
			victim = id
		}
	}
	if victim == 0 {
		t.Fatal("every node leads a group, or knows no leader of one")
	}
	loads := func(tn *testNode) uint64 { return tn.node.replicaLoads.Load() }
	before := map[uint64]uint64{}
	for id, tn := range c.nodes {
		before[id] = loads(tn)
	}
	idle := 5 * time.Duration(c.nodes[victim].node.cfg.ElectionTicks) * c.tickInterval()
	disk := c.crash(victim, nil)
	time.Sleep(idle)
	c.start(victim, disk)
	before[victim] = 0
	time.Sleep(idle)
	for id, tn := range c.nodes {
		if !tn.node.allUnloaded(len(tables)) || loads(tn) != before[id] {
			t.Fatalf("node %d, after node %d's restart: %d of %d replicas unloaded, %d raft log states loaded, %d loads (%d before)",
				id, victim, tn.node.unloadedNow(), len(tables), tn.rlog.LoadedGroups(), loads(tn), before[id])
		}
	}
	for i, tb := range tables {
		if e, err := readVia(c, tb, "p", "before"); err != nil || entityN(t, e) != i {
			t.Fatalf("%s/before after node %d's restart: %+v, %v; want N=%d", tb, victim, e, err, i)
		}
	}
}

// TestRestartWithASplitToMake: the catalog splits a range whose group
// has not split its span yet (every node's raft clock is stopped, so its
// leader has not looked), and the whole cluster restarts. The group is
// not started unloaded, for it has a split to make: it makes it, and
// every entity is read back from the two ranges.
func TestRestartWithASplitToMake(t *testing.T) {
	c, tables := unloadingTablesCluster(t, 3, 25, -1)
	tb := tables[0]
	for i := range 10 {
		upsertVia(c, tb, fmt.Sprintf("k%02d", i), "r", 100+i)
	}
	c.waitAll("every replica unloaded", func(tn *testNode) bool { return tn.node.allUnloaded(len(tables)) })
	for _, tn := range c.nodes {
		tn.paused.Store(true)
	}
	c.splitVia(tb, "k05")
	if rs := c.agreedRanges(tb, 10*time.Second); len(rs) != 2 {
		t.Fatalf("the catalog records ranges %+v, want two", rs)
	}
	parent := c.tableGroup(tb).ID
	c.restartAll()
	// Read from the stores only: a look at the group (testGroup) would
	// load it.
	c.waitAll("the parent's span split", func(tn *testNode) bool {
		sp, ok, err := tn.node.st().GroupSpan(parent)
		return err == nil && ok && sp.HighPartitionKey == "k05"
	})
	c.waitSplit(tb, []string{"", "k05"}, 20*time.Second)
	for i := range 10 {
		if e, err := readVia(c, tb, fmt.Sprintf("k%02d", i), "r"); err != nil || entityN(t, e) != 100+i {
			t.Fatalf("k%02d after the split: %+v, %v; want N=%d", i, e, err, 100+i)
		}
	}
}

// TestRemovedWhileDownRetiresAfterASystemSnapshot: a node is down while
// its member of an idle group is moved away, and so long that it catches
// up by a snapshot of the system group, which brings it the group's new
// descriptor with no entry to apply. It started the group unloaded, by
// its old catalog; the snapshot wakes it, and it learns it was removed
// and retires. The node's other groups, which the snapshot did not
// change, stay unloaded.
func TestRemovedWhileDownRetiresAfterASystemSnapshot(t *testing.T) {
	c, tables := unloadingTablesCluster(t, 4, 26, -1)
	g := c.tableGroup(tables[0])
	sys := c.leader(time.Second).id
	var down, outside uint64
	for _, id := range c.peers {
		switch {
		case !g.Has(id):
			outside = id
		case id != sys && down == 0:
			down = id
		}
	}
	idle := func(tn *testNode) bool { return tn.node.rangeReplicasLoaded() == 0 }
	c.waitAll("every replica unloaded", idle)
	disk := c.nodes[down].fs
	c.stop(down)
	moved := []uint64{outside}
	for _, v := range g.Voters {
		if v != down {
			moved = append(moved, v)
		}
	}
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.n.SetGroupVoters(context.Background(), g.ID, moved)
	}); err != nil {
		t.Fatal(err)
	}
	c.waitMembers(g.ID, moved, 20*time.Second)
	// Past the system group's log retention: the node comes back to a
	// log that starts after its applied index.
	for i := range 120 {
		if _, err := retryAny(c, func(s *Store) (struct{}, error) {
			return struct{}{}, s.SetServiceProperties(context.Background(), acct, []byte(fmt.Sprint(i)))
		}); err != nil {
			t.Fatal(err)
		}
	}
	tn := c.start(down, disk)
	c.waitAll("the node caught up by a snapshot", func(tn *testNode) bool {
		return tn.id != down || tn.node.Status().SnapshotsInstalled > 0
	})
	// Read without loading the replica (testGroup would).
	for deadline := time.Now().Add(20 * time.Second); tn.node.hostsGroup(g.ID) || !tn.logGroup(g.ID).Replica().Removed; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			u, unloaded := tn.node.unloadedReplica(g.ID)
			t.Fatalf("node %d still hosts group %d, removed from it while down (unloaded %v: %+v)", down, g.ID, unloaded, u)
		}
	}
	// The groups whose descriptors the snapshot left as they were stay
	// unloaded: only the one it moved was loaded, to retire.
	if loads := tn.node.replicaLoads.Load(); loads != 1 {
		t.Fatalf("node %d loaded %d replicas after the snapshot, want only group %d's", down, loads, g.ID)
	}
}

// TestRestartWarmsIdleGroups: after a restart of the whole cluster, the
// nodes warm the groups no request reaches: every group elects a leader,
// whose leaseholder reports its range, and unloads again, its leader
// known.
func TestRestartWarmsIdleGroups(t *testing.T) {
	c, tables := unloadingTablesCluster(t, 3, 27, -1)
	c.waitAll("every replica unloaded", func(tn *testNode) bool { return tn.node.allUnloaded(len(tables)) })
	c.prepare = func(tn *testNode) { tn.node.unloadTicks = 3 * tn.node.cfg.ElectionTicks }
	c.restartAll()
	c.waitAll("every group warmed and unloaded again", func(tn *testNode) bool {
		if !tn.node.allUnloaded(len(tables)) || tn.node.replicaLoads.Load() == 0 {
			return false
		}
		for _, g := range tn.node.groupStatus() {
			if g.Leader == 0 {
				return false
			}
		}
		return true
	})
	reported := map[uint64]bool{}
	for rs := range c.net.rangeStats(context.Background()) {
		if rs.Group != systemGroup {
			reported[rs.Group] = true
		}
	}
	if len(reported) != len(tables) {
		t.Fatalf("the leaseholders report the ranges of groups %v, want %d groups", reported, len(tables))
	}
	for i, tb := range tables {
		if e, err := readVia(c, tb, "p", "before"); err != nil || entityN(t, e) != i {
			t.Fatalf("%s/before after the restart: %+v, %v; want N=%d", tb, e, err, i)
		}
	}
}

// TestRestartDuringAMergeLoadsItsGroupOnly: a node holds the right
// group of table pairs frozen, for a merge its replica of the left group
// has not made yet (deaf to that group), beside idle tables whose
// replicas it has unloaded, and restarts. The left group starts loaded,
// for it has the merge to make: its span ends before its range does, or,
// once the catalog split the table again where it merged it, where the
// frozen span starts. The idle groups stay unloaded, as they do with no
// merge under way (a start used to load every group while any span of
// the store was frozen). Heard again, the left group merges (and splits),
// and everything reads back.
func TestRestartDuringAMergeLoadsItsGroupOnly(t *testing.T) {
	for _, splitAgain := range []bool{false, true} {
		t.Run(fmt.Sprintf("splitAgain=%v", splitAgain), func(t *testing.T) {
			c, right, x, want := frozenBehindTheMergePrepared(t, 29, func(tn *testNode) {
				tn.node.unloadTicks, tn.node.noWarming = 3*tn.node.cfg.ElectionTicks, true
			})
			left := c.tableGroup("pairs")
			tables := []string{"alpha", "beta", "gamma", "delta"}
			var idle []uint64
			for i, tb := range tables {
				createVia(c, tb)
				upsertVia(c, tb, "p", "before", i)
				idle = append(idle, c.tableGroup(tb).ID)
			}
			starts := []string{""}
			if splitAgain {
				c.splitVia("pairs", "p20")
				starts = []string{"", "p20"}
			}
			unloaded := func(tn *testNode) []uint64 {
				var ids []uint64
				for _, id := range idle {
					if _, ok := tn.node.unloadedReplica(id); ok {
						ids = append(ids, id)
					}
				}
				return ids
			}
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				frozen, _ := x.node.st().GroupFrozen(right.Group.ID)
				ranges, err := x.node.st().TableRanges(acct, "pairs")
				if frozen && err == nil && len(ranges) == len(starts) && len(unloaded(x)) == len(idle) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("node %d: group %d frozen %v, ranges %+v (%v), idle groups %v unloaded of %v; groups %+v, kept by %v",
						x.id, right.Group.ID, frozen, ranges, err, unloaded(x), idle, x.node.groupStatus(), x.node.unloadBlockers())
				}
			}
			fs := x.fs
			c.stop(x.id)
			x = c.start(x.id, fs)
			if frozen, _ := x.node.st().GroupFrozen(right.Group.ID); !frozen {
				t.Fatalf("node %d no longer holds group %d frozen: the test lost its point", x.id, right.Group.ID)
			}
			if got := unloaded(x); len(got) != len(idle) || x.node.group(left.ID) == nil {
				t.Fatalf("node %d started with idle groups %v unloaded of %v, the merging group %d loaded: %v",
					x.id, got, idle, left.ID, x.node.group(left.ID) != nil)
			}
			c.net.hear(x.id, left.ID)
			c.waitSplit("pairs", starts, 20*time.Second)
			for deadline := time.Now().Add(20 * time.Second); mustRecorded(t, x.node.st(), right.Group.ID); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("node %d still records group %d", x.id, right.Group.ID)
				}
			}
			c.checkPairs("pairs", want, "after the merge")
			for i, tb := range tables {
				if e, err := readVia(c, tb, "p", "before"); err != nil || entityN(t, e) != i {
					t.Fatalf("%s/before after the restart: %+v, %v; want N=%d", tb, e, err, i)
				}
			}
			for _, tn := range c.nodes {
				if err := tn.node.Err(); err != nil {
					t.Fatalf("node %d: %v", tn.id, err)
				}
			}
		})
	}
}

// TestVoterFirstHeardCatchesUp: a node is down while the others restart
// and a group takes a write without it, so the group's leader quiesces
// with that voter behind. The node's first word to the restarted nodes
// counts as a return: the leader wakes and sends it the write, with no
// other request to the group.
func TestVoterFirstHeardCatchesUp(t *testing.T) {
	c, tables := unloadingTablesCluster(t, 3, 28, -1)
	g := c.tableGroup(tables[0]).ID
	c.convergeGroup(g, 20*time.Second)
	const victim = 3
	victimFS := c.nodes[victim].fs
	c.stop(victim)
	c.restartAll()
	upsertVia(c, tables[0], "p", "during", 100)
	c.waitAll("the group quiesced", func(tn *testNode) bool { return tn.node.quiescedHere(g) })
	applied := func(tn *testNode) uint64 {
		i, err := tn.node.st().AppliedIndex(g)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	var want uint64
	for _, tn := range c.nodes {
		want = max(want, applied(tn))
	}
	back := c.start(victim, victimFS)
	for deadline := time.Now().Add(20 * time.Second); applied(back) < want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node %d applied entry %d of group %d, the others %d, 20s after its return", victim, applied(back), g, want)
		}
	}
	if e, err := back.node.st().GetEntity(context.Background(), acct, tables[0], "p", "during"); err != nil || entityN(t, e) != 100 {
		t.Fatalf("the write made while node %d was down, on it: %+v, %v", victim, e, err)
	}
}

// unloadingTablesCluster starts size nodes that unload replicas after
// three election timeouts and warm no cold record (warmCold has its own
// tests), with four tables of range groups of their own, one entity each
// ("p"/"before", N the table's index), and returns the tables.
func unloadingTablesCluster(t *testing.T, size int, seed uint64, placementInterval time.Duration) (*testCluster, []string) {
	c := &testCluster{t: t, net: newSimNet(seed), nodes: map[uint64]*testNode{}, rangeGroups: true, placementInterval: placementInterval,
		prepare: func(tn *testNode) { tn.node.unloadTicks, tn.node.noWarming = 3*tn.node.cfg.ElectionTicks, true }}
	c.startAll(size)
	tables := []string{"alpha", "beta", "gamma", "delta"}
	for i, tb := range tables {
		createVia(c, tb)
		upsertVia(c, tb, "p", "before", i)
	}
	return c, tables
}

// waitAll waits until cond holds of every running node.
func (c *testCluster) waitAll(what string, cond func(*testNode) bool) {
	c.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		done := true
		for _, tn := range c.nodes {
			done = done && cond(tn)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			for _, tn := range c.nodes {
				c.t.Logf("node %d: %+v, %d raft log states loaded; kept by %v", tn.id, tn.node.Status(), tn.rlog.LoadedGroups(), tn.node.unloadBlockers())
			}
			c.t.Fatalf("not %s after 20s", what)
		}
	}
}

// allUnloaded says whether the node has its want range replicas
// unloaded, and raft log state in memory of the system group only.
func (n *Node) allUnloaded(want int) bool {
	return n.unloadedNow() == want && n.cfg.Log.LoadedGroups() == 1
}

// unloadedNow counts the node's unloaded replicas (Status counts them as
// of its last tick): its records in the raft log's engine, or -1 if their
// count is not the node's count of them, or one does not decode.
func (n *Node) unloadedNow() int {
	n.replicasMu.RLock()
	defer n.replicasMu.RUnlock()
	records := 0
	if err := n.eachUnloaded(func(uint64, unloadedReplica) bool { records++; return true }); err != nil || records != n.unloadedCount {
		return -1
	}
	return records
}

// rangeReplicasLoaded counts the node's range replicas in memory.
func (n *Node) rangeReplicasLoaded() int {
	n.replicasMu.RLock()
	defer n.replicasMu.RUnlock()
	return len(n.replicas) - 1
}

// TestUnloadedRecordEncoding: every field of a record survives its
// encoding, and a value cut short, padded or flagged beyond what is known
// is refused as corruption.
func TestUnloadedRecordEncoding(t *testing.T) {
	recs := []unloadedReplica{
		{},
		{leader: 1<<32 | 3, applied: ^uint64(0), lastStamp: math.MaxInt64, appliedTS: math.MinInt64},
		{dormantLeader: true}, {tableless: true}, {votersBehind: true}, {cold: true}, {loading: true}, {moving: true},
		{leader: 2, applied: 9, lastStamp: 5, appliedTS: 4, dormantLeader: true, tableless: true, votersBehind: true, cold: true, loading: true, moving: true},
	}
	for _, u := range recs {
		v := u.encode()
		got, err := decodeUnloaded(v)
		if err != nil || got != u {
			t.Fatalf("%+v reads back as %+v (%v)", u, got, err)
		}
		for _, bad := range [][]byte{v[:len(v)-1], append(slices.Clone(v), 0), append(slices.Clone(v[:len(v)-1]), 64), append([]byte{2}, v[1:]...), nil} {
			if _, err := decodeUnloaded(bad); !errors.Is(err, lsm.ErrCorruption) {
				t.Fatalf("value %x decoded with error %v; want corruption", bad, err)
			}
		}
	}
}

// staleRecord writes into the raft log on disk a record of group, as a
// run before the node's next start could have left it.
func staleRecord(t *testing.T, disk *vfs.MemFS, group uint64) {
	t.Helper()
	rlog, err := raftlog.Open("/raft", &raftlog.Options{FS: disk})
	if err != nil {
		t.Fatal(err)
	}
	if err := rlog.SetUnloaded(map[uint64][]byte{group: unloadedReplica{leader: 1, applied: 5, dormantLeader: true}.encode()}); err != nil {
		t.Fatal(err)
	}
	if err := rlog.Close(); err != nil {
		t.Fatal(err)
	}
}
