package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// retryAny runs f on the Store of each running node in turn until one
// answers other than 503 ServerBusy: the in-process stand-in for the HTTP
// layer's routing to a table's leader.
func retryAny[T any](c *testCluster, f func(*Store) (T, error)) (T, error) {
	c.t.Helper()
	var zero T
	for range 400 {
		for _, tn := range c.nodes {
			v, err := f(tn.node.Store())
			if isBusy(err) {
				continue
			}
			return v, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return zero, errors.New("no node took the request")
}

// tableGroup returns the range group every running node records for
// table, failing unless they all record the same.
func (c *testCluster) tableGroup(table string) partition.RangeGroup {
	c.t.Helper()
	var first partition.RangeGroup
	for _, tn := range c.nodes {
		g, err := tn.node.st().TableGroup(acct, table)
		if err != nil {
			c.t.Fatalf("node %d: table %s: %v", tn.id, table, err)
		}
		if first.ID == 0 {
			first = g
		} else if g.ID != first.ID || !slices.Equal(g.Voters, first.Voters) {
			c.t.Fatalf("node %d records group %+v for %s, another node %+v", tn.id, g, table, first)
		}
	}
	return first
}

// agreedRanges waits until every running node records the same ranges of
// table, and returns them.
func (c *testCluster) agreedRanges(table string, timeout time.Duration) []partition.TableGroup {
	c.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(5 * time.Millisecond) {
		var first []partition.TableGroup
		agreed := true
		for _, tn := range c.nodes {
			rs, err := tn.node.st().TableRanges(acct, table)
			switch {
			case err != nil:
				agreed = false
			case first == nil:
				first = rs
			case !reflect.DeepEqual(rs, first):
				agreed = false
			}
		}
		if agreed {
			return first
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the nodes do not agree on table %s's ranges after %v", table, timeout)
		}
	}
}

// convergeGroup waits until every running node has applied what group g's
// leader has.
func (c *testCluster) convergeGroup(g uint64, timeout time.Duration) {
	c.t.Helper()
	c.convergeMembers(g, nil, timeout)
}

// convergeMembers waits until the running nodes of members (every one
// when nil) have applied as far as the furthest of them, and none has
// gone further meanwhile (a write whose client gave up may still commit
// late). The furthest, not the leader: a leader that stood still may not
// know yet that it was deposed.
func (c *testCluster) convergeMembers(g uint64, members []uint64, timeout time.Duration) {
	c.t.Helper()
	furthest := func() uint64 {
		c.groupLeader(g, timeout) // the group has one
		var most uint64
		for _, tn := range c.nodes {
			if r := tn.node.testGroup(g); r != nil && (members == nil || slices.Contains(members, tn.id)) {
				most = max(most, r.applied.Load())
			}
		}
		return most
	}
	for {
		target := furthest()
		c.convergeTo(g, members, target, timeout)
		if c.stable(func() uint64 { return furthest() }, target) {
			return
		}
	}
}

// stable reports whether at is still at target; with settle, whether it
// stays there for a while: long enough for a write proposed before the
// clients stopped, which an election may commit late, to show.
func (c *testCluster) stable(at func() uint64, target uint64) bool {
	if !c.settle {
		return at() == target
	}
	for range 3 {
		time.Sleep(10 * c.tickInterval())
		if at() != target {
			return false
		}
	}
	return true
}

// convergeTo waits until the running nodes of members (every one when
// nil) have applied group g up to target.
func (c *testCluster) convergeTo(g uint64, members []uint64, target uint64, timeout time.Duration) {
	c.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(5 * time.Millisecond) {
		behind := 0
		for _, tn := range c.nodes {
			if members != nil && !slices.Contains(members, tn.id) {
				continue
			}
			if r := tn.node.testGroup(g); r == nil || r.applied.Load() < target {
				behind++
			}
		}
		if behind == 0 {
			return
		}
		if time.Now().After(deadline) {
			var states []string
			for _, tn := range c.nodes {
				if r := tn.node.testGroup(g); r != nil {
					states = append(states, fmt.Sprintf("node %d: applied %d, leader %d, quiesced %v, conf %v", tn.id, r.applied.Load(),
						r.leader.Load(), r.quiesced.Load(), r.confState()))
				}
			}
			c.t.Fatalf("group %d: %d nodes behind index %d after %v:\n%s", g, behind, target, timeout, strings.Join(states, "\n"))
		}
	}
}

func upsertVia(c *testCluster, table, pk, rk string, n int) {
	c.t.Helper()
	if _, err := retryAny(c, func(s *Store) (partition.StoredEntity, error) {
		return s.Apply(context.Background(), acct, table, opUpsert(pk, rk, n))
	}); err != nil {
		c.t.Fatalf("upsert %s/%s: %v", pk, rk, err)
	}
}

func readVia(c *testCluster, table, pk, rk string) (partition.StoredEntity, error) {
	c.t.Helper()
	return retryAny(c, func(s *Store) (partition.StoredEntity, error) {
		return s.GetEntity(context.Background(), acct, table, pk, rk)
	})
}

func createVia(c *testCluster, table string) {
	c.t.Helper()
	if _, err := retryAny(c, func(s *Store) (partition.Table, error) {
		return s.CreateTable(context.Background(), acct, table)
	}); err != nil {
		c.t.Fatalf("create %s: %v", table, err)
	}
	c.converge(10 * time.Second)
}

// TestTablesGetRangeGroups follows a table through its life with range
// groups on: created with a group of three voters that every node records
// alike and hosts; written and read through that group, not the system
// group's log; served by a new leader when the group's leader stops, and
// caught up by it when it returns; dropped with its group and the group's
// raft log; created again under a new group, empty.
func TestTablesGetRangeGroups(t *testing.T) {
	c := newTablesCluster(t, 3, 21)
	createVia(c, "ranged")
	g := c.tableGroup("ranged")
	if g.ID <= systemGroup || !slices.Equal(slices.Sorted(slices.Values(g.Voters)), []uint64{1, 2, 3}) {
		t.Fatalf("group %+v: want an id above the system group's and voters 1, 2, 3", g)
	}
	c.groupLeader(g.ID, 10*time.Second)

	sysBefore := c.leader(10 * time.Second).node.applied.Load()
	for i := range 30 {
		upsertVia(c, "ranged", "p", fmt.Sprintf("r%02d", i), i)
	}
	if d := c.leader(10*time.Second).node.applied.Load() - sysBefore; d > 3 {
		t.Fatalf("the system group applied %d entries during 30 entity writes: they went through its log", d)
	}
	c.convergeGroup(g.ID, 10*time.Second)
	want := dump(t, c.nodes[1].node.st(), "ranged")
	for _, tn := range c.nodes {
		if got := dump(t, tn.node.st(), "ranged"); got != want {
			t.Fatalf("node %d holds\n%s\nnode 1\n%s", tn.id, got, want)
		}
		if a, err := tn.node.st().AppliedIndex(g.ID); err != nil || a == 0 {
			t.Fatalf("node %d: applied index of group %d = %d, %v", tn.id, g.ID, a, err)
		}
		if gs := tn.node.groupStatus(); len(gs) != 1 || gs[0].Group != g.ID || gs[0].Leader == 0 || gs[0].Applied == 0 {
			t.Fatalf("node %d: group status %+v", tn.id, gs)
		}
	}

	// The group's leader stops: another takes the table over.
	old := c.groupLeader(g.ID, 10*time.Second)
	oldFS := old.fs
	c.stop(old.id)
	for i := 30; i < 40; i++ {
		upsertVia(c, "ranged", "p", fmt.Sprintf("r%02d", i), i)
	}
	if e, err := readVia(c, "ranged", "p", "r39"); err != nil || entityN(t, e) != 39 {
		t.Fatalf("read after failover: %+v, %v", e, err)
	}
	back := c.start(old.id, oldFS)
	if back.node.testGroup(g.ID) == nil {
		t.Fatalf("node %d restarted without its range group %d", old.id, g.ID)
	}
	c.convergeGroup(g.ID, 10*time.Second)
	if got, want := dump(t, back.node.st(), "ranged"), dump(t, c.groupLeader(g.ID, time.Second).node.st(), "ranged"); got != want {
		t.Fatalf("restarted node holds\n%s\nthe leader\n%s", got, want)
	}

	// Dropped: the group and its log go on every node.
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.DeleteTable(context.Background(), acct, "ranged")
	}); err != nil {
		t.Fatal(err)
	}
	c.converge(10 * time.Second)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		hosting := 0
		for _, tn := range c.nodes {
			ids, err := tn.rlog.Groups()
			if err != nil {
				t.Fatal(err)
			}
			if tn.node.testGroup(g.ID) != nil || slices.Contains(ids, g.ID) {
				hosting++
			}
		}
		if hosting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d nodes still host group %d or hold its raft log after its table's drop", hosting, g.ID)
		}
	}

	// Created again: a new group, and none of the old entities.
	createVia(c, "ranged")
	g2 := c.tableGroup("ranged")
	if g2.ID == g.ID {
		t.Fatalf("the table created again reuses group %d", g.ID)
	}
	upsertVia(c, "ranged", "p", "new", 1)
	if _, err := readVia(c, "ranged", "p", "r00"); !partition.IsCode(err, partition.CodeResourceNotFound) {
		t.Fatalf("an entity of the dropped table: %v, want ResourceNotFound", err)
	}
	if e, err := readVia(c, "ranged", "p", "new"); err != nil || entityN(t, e) != 1 {
		t.Fatalf("the new table's entity: %+v, %v", e, err)
	}
}

// TestRangeGroupTablesSurviveCrashes writes to two tables with range
// groups while nodes lose power one after another and then all at once:
// every acknowledged write is there after each restart, on every node.
func TestRangeGroupTablesSurviveCrashes(t *testing.T) {
	c := newTablesCluster(t, 3, 22)
	rng := rand.New(rand.NewPCG(22, 0))
	tables := []string{"alpha", "beta"}
	for _, tb := range tables {
		createVia(c, tb)
	}
	acked := map[string]int{}
	write := func(round int) {
		for i := range 10 {
			tb := tables[i%2]
			key := fmt.Sprintf("r%d-%d", round, i)
			upsertVia(c, tb, "p", key, round*100+i)
			acked[tb+"/"+key] = round*100 + i
		}
	}
	check := func() {
		t.Helper()
		for k, n := range acked {
			tb, rk, _ := strings.Cut(k, "/")
			e, err := readVia(c, tb, "p", rk)
			if err != nil || entityN(t, e) != n {
				t.Fatalf("%s: %+v, %v; want N=%d", k, e, err, n)
			}
		}
	}
	for round, id := range []uint64{1, 2, 3} {
		write(round)
		fs := c.crash(id, rng)
		c.start(id, fs)
		check()
	}
	write(9)
	disks := map[uint64]*vfs.MemFS{}
	for _, id := range c.peers {
		disks[id] = c.crash(id, rng)
	}
	for _, id := range c.peers {
		c.start(id, disks[id])
	}
	check()
}

// leaveBehind stops a follower of table's group and writes 150 entities
// to the table over partitions partitions: past SyncEvery (50) plus
// LogRetention (30), so the group's log no longer holds what the
// follower lacks. It returns the stopped node and its disk.
func (c *testCluster) leaveBehind(table string, partitions int) (*testNode, *vfs.MemFS) {
	c.t.Helper()
	ld := c.groupLeader(c.tableGroup(table).ID, 10*time.Second)
	lag := c.nodes[otherThan(c, ld.id)]
	c.stop(lag.id)
	for i := range 150 {
		upsertVia(c, table, fmt.Sprintf("p%d", i%partitions), fmt.Sprintf("r%03d", i), i)
	}
	return lag, lag.fs
}

// TestSpanIngestLeavesOtherGroupsRunning holds a returning node's ingest
// of a span snapshot: meanwhile the node goes on with its other groups (it
// applies another table's writes as they come), and once the ingest ends
// the group catches up. An ingest on the loop's turn, as it once was,
// stopped every group of the node for as long as it ran.
func TestSpanIngestLeavesOtherGroupsRunning(t *testing.T) {
	c := newTablesCluster(t, 3, 25)
	createVia(c, "slow")
	createVia(c, "busy")
	g, busy := c.tableGroup("slow"), c.tableGroup("busy")
	lag, lagFS := c.leaveBehind("slow", 3)
	held, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	c.prepare = func(tn *testNode) {
		if tn.id != lag.id {
			return
		}
		tn.node.beforeSpanIngest = func(group uint64) {
			if group == g.ID {
				select {
				case held <- struct{}{}:
				default:
				}
				<-release
			}
		}
	}
	back := c.start(lag.id, lagFS)
	c.prepare = nil
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("no span snapshot ingest began")
	}
	for i := range 20 {
		upsertVia(c, "busy", "p", fmt.Sprintf("r%02d", i), i)
	}
	c.convergeGroup(busy.ID, 10*time.Second)
	if got := dump(t, back.node.st(), "busy"); !strings.Contains(got, "p/r19") {
		t.Fatalf("the node applied none of the other table's writes while the ingest was held: %q", got)
	}
	if n := back.node.Status().SpanSnapshotsInstalled; n != 0 {
		t.Fatalf("%d span snapshots installed while the ingest was held", n)
	}
	once.Do(func() { close(release) })
	upsertVia(c, "slow", "p0", "after", 1000)
	c.convergeGroup(g.ID, 20*time.Second)
	ld := c.groupLeader(g.ID, 10*time.Second)
	if got, want := dump(t, back.node.st(), "slow"), dump(t, ld.node.st(), "slow"); got != want {
		t.Fatalf("the returning node holds\n%s\nthe leader\n%s", got, want)
	}
}

// TestRangeGroupCatchesUpBySnapshot stops a voter of a table's group
// while the others write far past what their logs keep: back, it catches
// up from a snapshot of the table's span (not of the whole store), holds
// what the others hold, and takes the writes that follow from the log.
func TestRangeGroupCatchesUpBySnapshot(t *testing.T) {
	c := newTablesCluster(t, 3, 23)
	createVia(c, "snapped")
	createVia(c, "other")
	upsertVia(c, "other", "p", "kept", 1)
	g := c.tableGroup("snapped")
	lag, lagFS := c.leaveBehind("snapped", 7)
	ld := c.groupLeader(g.ID, 10*time.Second)
	if first, _ := ld.node.testGroup(g.ID).rlog.FirstIndex(); first <= 2 {
		t.Fatalf("the leader's log of group %d starts at %d: not compacted", g.ID, first)
	}
	back := c.start(lag.id, lagFS)
	upsertVia(c, "snapped", "p0", "after", 1000)
	c.convergeGroup(g.ID, 20*time.Second)
	if st := back.node.Status(); st.SpanSnapshotsInstalled == 0 || st.SnapshotsInstalled != 0 {
		t.Fatalf("the returning node caught up without a span snapshot, or with a store snapshot: %+v", st)
	}
	want := dump(t, ld.node.st(), "snapped")
	if got := dump(t, back.node.st(), "snapped"); got != want {
		t.Fatalf("the returning node holds\n%s\nthe leader\n%s", got, want)
	}
	c.convergeGroup(c.tableGroup("other").ID, 20*time.Second)
	if got := dump(t, back.node.st(), "other"); !strings.Contains(got, "p/kept") {
		t.Fatalf("the other table on the returning node: %q", got)
	}
	// Dropped, the table's pinned span views go on the node that made
	// them: whichever led the group then (the leases may have moved
	// since ld was found).
	served := func() (n int) {
		for _, tn := range c.nodes {
			tn.node.snaps.mu.Lock()
			for _, s := range tn.node.snaps.served {
				if s.group == g.ID {
					n++
				}
			}
			tn.node.snaps.mu.Unlock()
		}
		return n
	}
	if served() == 0 {
		t.Fatal("no leader made a span snapshot, or lists it")
	}
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.DeleteTable(context.Background(), acct, "snapped")
	}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); served() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d span views of the dropped group %d still pinned", served(), g.ID)
		}
	}
	// Its files: no fetched snapshot left behind.
	names, err := back.fs.List("/node")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, ".snap") {
			t.Errorf("a fetched span snapshot left behind: %s", name)
		}
	}
}

// TestSpanSnapshotCrashBeforeTheLogRecordsIt takes the disk of a node as
// a power loss would leave it right after a span snapshot went into its
// store and before its raft log recorded it: started from that disk, the
// node records the snapshot from the record it wrote beside the store,
// and catches up like the others.
func TestSpanSnapshotCrashBeforeTheLogRecordsIt(t *testing.T) {
	c := newTablesCluster(t, 3, 24)
	createVia(c, "crashy")
	g := c.tableGroup("crashy")
	lag, lagFS := c.leaveBehind("crashy", 1)
	crashed := c.crashAfterSpanIngest(lag.id, lagFS, g.ID, 24)
	back := c.start(lag.id, crashed)
	upsertVia(c, "crashy", "p", "after", 1000)
	c.convergeGroup(g.ID, 20*time.Second)
	if err := back.node.Err(); err != nil {
		t.Fatal(err)
	}
	c.storeLikeLeader(back, g.ID, "crashy")
}

// crashAfterSpanIngest starts node id on disk and returns its disk as a
// power loss (seeded) leaves it right after a span snapshot of group went
// into its store, before the node goes on with it; the node is stopped.
func (c *testCluster) crashAfterSpanIngest(id uint64, disk *vfs.MemFS, group uint64, seed uint64) *vfs.MemFS {
	c.t.Helper()
	crashed := make(chan *vfs.MemFS, 1)
	rng := rand.New(rand.NewPCG(seed, 1))
	c.prepare = func(tn *testNode) {
		if tn.id != id {
			return
		}
		var once sync.Once
		tn.node.afterSpanIngest = func(g uint64) {
			if g == group {
				once.Do(func() { crashed <- c.powerLoss(tn, rng) })
			}
		}
	}
	defer func() { c.prepare = nil }()
	c.start(id, disk)
	select {
	case clone := <-crashed:
		c.stop(id)
		return clone
	case <-time.After(30 * time.Second):
		c.t.Fatalf("no span snapshot of group %d went into node %d's store", group, id)
		return nil
	}
}

// storeLikeLeader checks that tn's store holds table as its group g's
// leader's does, once the group has converged: a replica that has applied
// as far as the others holds what they hold.
func (c *testCluster) storeLikeLeader(tn *testNode, g uint64, table string) {
	c.t.Helper()
	if got, want := dump(c.t, tn.node.st(), table), dump(c.t, c.groupLeader(g, time.Second).node.st(), table); got != want {
		c.t.Fatalf("table %s on node %d:\n%s\nits leader's:\n%s", table, tn.id, got, want)
	}
}

// TestSystemSnapshotKeepsRangeGroups stops a node while the system
// group's log moves far past what it keeps (so the node must take a
// snapshot of the leader's whole store) and while a table is created and
// another dropped. Back, the node keeps its own copy of the group it
// hosted (its log continues that copy, not the leader's), starts the new
// table's group from nothing, drops the dropped table's group, and ends
// with every group's data equal to its leader's.
func TestSystemSnapshotKeepsRangeGroups(t *testing.T) {
	c := newTablesCluster(t, 3, 25)
	for _, tb := range []string{"kept", "dropped"} {
		createVia(c, tb)
		upsertVia(c, tb, "p", "before", 1)
	}
	kept, dropped := c.tableGroup("kept"), c.tableGroup("dropped")
	c.convergeGroup(dropped.ID, 20*time.Second)
	lag := c.nodes[otherThan(c, c.leader(10*time.Second).id)]
	lagFS := lag.fs
	c.stop(lag.id)

	upsertVia(c, "kept", "p", "during", 2)
	// The dropped table's group goes on without the lagging node, whose
	// log of it then ends before the index the snapshot's store records.
	upsertVia(c, "dropped", "p", "missed", 2)
	createVia(c, "fresh")
	upsertVia(c, "fresh", "p", "new", 3)
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.DeleteTable(context.Background(), acct, "dropped")
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 { // past SyncEvery (50) plus LogRetention (30) in the system log
		if _, err := retryAny(c, func(s *Store) (struct{}, error) {
			return struct{}{}, s.SetTableACL(context.Background(), acct, "kept", []partition.SignedIdentifier{{ID: fmt.Sprintf("id%d", i), Permission: "r"}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	fresh := c.tableGroup("fresh")

	back := c.start(lag.id, lagFS)
	c.converge(20 * time.Second)
	if st := back.node.Status(); st.SnapshotsInstalled == 0 {
		t.Fatalf("the returning node caught up without a snapshot of the system group: %+v", st)
	}
	for _, g := range []uint64{kept.ID, fresh.ID} {
		c.convergeGroup(g, 20*time.Second)
	}
	for _, tb := range []string{"kept", "fresh"} {
		g := c.tableGroup(tb)
		c.storeLikeLeader(back, g.ID, tb)
	}
	for deadline := time.Now().Add(10 * time.Second); back.node.testGroup(dropped.ID) != nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the returning node still hosts the dropped table's group %d", dropped.ID)
		}
	}
	// The group it kept goes on taking writes.
	upsertVia(c, "kept", "p", "after", 4)
	c.convergeGroup(kept.ID, 20*time.Second)
	if e, err := back.node.st().GetEntity(context.Background(), acct, "kept", "p", "after"); err != nil || entityN(t, e) != 4 {
		t.Fatalf("a write after the snapshot on the returning node: %+v, %v", e, err)
	}
}

// TestRangeGroupsTurnedOnInARunningCluster restarts a cluster whose
// tables were made without range groups with them on: the old table
// stays in the system group, a new one gets its own, and both take writes
// and reads, through the groups they belong to, across a further restart.
func TestRangeGroupsTurnedOnInARunningCluster(t *testing.T) {
	c := newTestCluster(t, 3, 26)
	createVia(c, "old")
	upsertVia(c, "old", "p", "before", 1)
	c.rangeGroups = true
	c.restartAll()
	createVia(c, "new")
	if g := c.tableGroup("old"); g.ID != 0 {
		t.Fatalf("the old table got group %+v", g)
	}
	g := c.tableGroup("new")
	if g.ID == 0 {
		t.Fatal("a table made with range groups on has none")
	}
	sysBefore := c.leader(10 * time.Second).node.applied.Load()
	for i := range 10 {
		upsertVia(c, "new", "p", fmt.Sprintf("r%d", i), i)
	}
	if d := c.leader(10*time.Second).node.applied.Load() - sysBefore; d > 3 {
		t.Fatalf("the system group applied %d entries during 10 writes to the new table", d)
	}
	upsertVia(c, "old", "p", "after", 2)
	c.restartAll()
	for _, want := range []struct {
		table, rk string
		n         int
	}{{"old", "before", 1}, {"old", "after", 2}, {"new", "r9", 9}} {
		if e, err := readVia(c, want.table, "p", want.rk); err != nil || entityN(t, e) != want.n {
			t.Fatalf("%s/%s after the restarts: %+v, %v", want.table, want.rk, e, err)
		}
	}
}

// TestTransferLease moves a table's lease to another voter; the table
// takes writes there after. A transfer to a voter that does not answer
// ends ServerBusy; a replica that does not hold the lease refuses and
// knows who does; a node that is no voter, or a missing table, is
// refused.
func TestTransferLease(t *testing.T) {
	c := newTablesCluster(t, 3, 27)
	createVia(c, "leased")
	g := c.tableGroup("leased")
	c.convergeGroup(g.ID, 10*time.Second) // every node hosts it and knows its leader
	from := c.groupLeader(g.ID, 10*time.Second)
	to := c.nodes[otherThan(c, from.id)]
	var asked *testNode // a replica that is neither
	for _, tn := range c.nodes {
		if tn != from && tn != to {
			asked = tn
		}
	}
	ctx := context.Background()
	if _, err := asked.node.TransferLease(ctx, acct, "leased", "", to.id); !errors.Is(err, ErrNotLeaseholder) || asked.node.groupLeader(g.ID) != from.id {
		t.Fatalf("a transfer asked of a follower: %v (it knows leader %d)", err, asked.node.groupLeader(g.ID))
	}
	// A target that does not answer: raft gives the transfer up, and the
	// leader says so rather than wait (the test's ctx has no deadline).
	c.net.deafen(to.id, g.ID)
	failed := make(chan error, 1)
	go func() {
		_, err := from.node.TransferLease(ctx, acct, "leased", "", to.id)
		failed <- err
	}()
	select {
	case err := <-failed:
		if !isBusy(err) && !errors.Is(err, ErrNotLeaseholder) { // the latter: an election came first
			t.Fatalf("a transfer to a node that does not answer: %v, want ServerBusy", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a transfer to a node that does not answer still waits after 30 s")
	}
	c.net.hear(to.id, g.ID)
	c.moveLease(g.ID, "leased", "", to)
	if ld := c.groupLeader(g.ID, 10*time.Second); ld != to {
		t.Fatalf("group %d is led by node %d, want %d", g.ID, ld.id, to.id)
	}
	upsertVia(c, "leased", "p", "moved", 1)
	if e, err := to.node.getInGroup(ctx, g.ID, acct, "leased", "p", "moved"); err != nil || entityN(t, e) != 1 {
		t.Fatalf("a read at the new leaseholder: %+v, %v", e, err)
	}
	if _, err := to.node.TransferLease(ctx, acct, "leased", "", 9); !errors.Is(err, ErrBadLease) {
		t.Fatalf("a lease to a node in no voter set: %v", err)
	}
	if _, err := asked.node.TransferLease(ctx, acct, "missing", "", to.id); !partition.IsCode(err, partition.CodeTableNotFound) {
		t.Fatalf("the lease of a missing table: %v", err)
	}
}
