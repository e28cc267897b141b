package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// newPlacementCluster starts a cluster whose tables get range groups and
// whose system leader places them often, counting a node dead after
// deadAfter.
func newPlacementCluster(t *testing.T, size int, seed uint64, deadAfter time.Duration) *testCluster {
	t.Helper()
	c := &testCluster{t: t, net: newSimNet(seed), nodes: map[uint64]*testNode{}, rangeGroups: true,
		placementInterval: 50 * time.Millisecond, deadAfter: deadAfter}
	c.startAll(size)
	return c
}

// loads counts the groups each node is named a voter of, as node id's
// catalog has it.
func (c *testCluster) loads(id uint64) map[uint64]int {
	out := map[uint64]int{}
	for _, tg := range c.nodes[id].node.st().TableGroups() {
		for _, v := range tg.Group.Voters {
			out[v]++
		}
	}
	return out
}

// TestPlacementReplacesADeadNode stops a voter of a table's group for
// longer than DeadAfter: the system leader names a live node in its
// place, the group moves there, and the writes acknowledged are on it.
// Back, the stopped node finds its member gone and lets it go.
func TestPlacementReplacesADeadNode(t *testing.T) {
	c := newPlacementCluster(t, 4, 51, 500*time.Millisecond)
	createVia(c, "lost")
	g := c.tableGroup("lost")
	sys := c.leader(10 * time.Second)
	var victim, spare uint64
	for _, id := range c.peers {
		switch {
		case !g.Has(id):
			spare = id
		case id != sys.id && victim == 0:
			victim = id
		}
	}
	for i := range 20 {
		upsertVia(c, "lost", "p", fmt.Sprintf("r%d", i), i)
	}
	fs := c.nodes[victim].fs
	c.stop(victim)
	upsertVia(c, "lost", "p", "while-down", 1)
	want := append(slices.DeleteFunc(slices.Clone(g.Voters), func(v uint64) bool { return v == victim }), spare)
	ld := c.waitMembers(g.ID, want, 20*time.Second)
	c.convergeMembers(g.ID, want, 10*time.Second)
	for _, rk := range []string{"r0", "r19", "while-down"} {
		if _, err := c.nodes[spare].node.st().GetEntity(context.Background(), acct, "lost", "p", rk); err != nil {
			t.Fatalf("the node that took the dead one's place lacks %s: %v", rk, err)
		}
	}
	c.start(victim, fs)
	c.waitRetired(victim, g.ID, "lost", 20*time.Second)
	if got := slices.Sorted(slices.Values(c.tableGroup("lost").Voters)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("the dead node came back and the descriptor moved again: %v, want %v", got, want)
	}
	_ = ld
}

// TestPlacementRemembersDownNodes: the controller records in the system
// group a voter that fell silent, and since when; a controller elected
// later counts DeadAfter from then rather than from its own election, so
// the dead node's groups are re-replicated on time across the change.
func TestPlacementRemembersDownNodes(t *testing.T) {
	const deadAfter = 6 * time.Second
	c := newPlacementCluster(t, 5, 53, deadAfter)
	createVia(c, "kept")
	g := c.tableGroup("kept")
	sys := c.leader(10 * time.Second)
	var victim uint64
	for _, v := range g.Voters {
		if v != sys.id && victim == 0 {
			victim = v
		}
	}
	fs := c.nodes[victim].fs
	c.stop(victim)
	silent := time.Now()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		recorded := 0
		for _, tn := range c.nodes {
			if down, err := tn.node.st().NodesDown(); err == nil && !down[victim].IsZero() {
				// Last heard within an election timeout of the stop (as
				// the controller's last look before it saw the silence).
				if since := down[victim]; since.After(silent.Add(time.Second)) {
					t.Fatalf("node %d records %d down since %v, well after it was stopped (%v)", tn.id, victim, since, silent)
				}
				recorded++
			}
		}
		if recorded == len(c.nodes) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes record node %d down", recorded, len(c.nodes), victim)
		}
	}
	// Most of DeadAfter passes under the first controller; then another
	// takes over.
	time.Sleep(time.Until(silent.Add(deadAfter - time.Second)))
	elected := c.stallAndCutOff(sys)
	for deadline := silent.Add(deadAfter + 2500*time.Millisecond); ; time.Sleep(10 * time.Millisecond) {
		if g, err := elected.node.st().TableGroup(acct, "kept"); err == nil && !g.Has(victim) {
			break
		}
		if time.Now().After(deadline) {
			// A controller that started counting at its election would
			// wait until about 11 s after the stop.
			t.Fatalf("node %d, stopped %v ago, is still a voter of the table's group", victim, time.Since(silent).Round(time.Millisecond))
		}
	}
	c.net.heal()
	sys.paused.Store(false)
	// Back, the node is heard again and its record goes.
	c.start(victim, fs)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		down, err := elected.node.st().NodesDown()
		if err == nil && down[victim].IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d came back and is still recorded down: %v, %v", victim, down, err)
		}
	}
}

// TestPlacementDrainsANode drains a voter of two tables' groups: both
// move off it to the other nodes, it hosts no member and holds none of
// their entities, and it can then leave the cluster with every table
// still on three nodes.
func TestPlacementDrainsANode(t *testing.T) {
	c := newPlacementCluster(t, 4, 52, time.Minute)
	for _, tb := range []string{"one", "two"} {
		createVia(c, tb)
		upsertVia(c, tb, "p", "r", 1)
	}
	sys := c.leader(10 * time.Second)
	var drained uint64
	// The controller may be moving the new groups' members already (four
	// nodes, three voters each), so the catalogs may differ for a moment.
	one := c.agreedRanges("one", 10*time.Second)[0].Group
	for _, id := range c.peers {
		if id != sys.id && one.Has(id) {
			drained = id
			break
		}
	}
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.n.DrainMember(context.Background(), drained)
	}); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []string{"one", "two"} {
		// While the group moves, the nodes' catalogs may differ for a
		// moment: each look waits until they agree.
		g := c.agreedRanges(tb, 10*time.Second)[0].Group
		for deadline := time.Now().Add(20 * time.Second); g.Has(drained); g = c.agreedRanges(tb, 10*time.Second)[0].Group {
			if time.Now().After(deadline) {
				t.Fatalf("table %s's group still names the drained node %d: %v", tb, drained, g.Voters)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(g.Voters) != 3 {
			t.Fatalf("table %s's group lost a voter: %v", tb, g.Voters)
		}
		c.waitMembers(g.ID, g.Voters, 20*time.Second)
		c.waitRetired(drained, g.ID, tb, 10*time.Second)
	}
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.n.RemoveMember(context.Background(), drained)
	}); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []string{"one", "two"} {
		if e, err := readVia(c, tb, "p", "r"); err != nil || entityN(t, e) != 1 {
			t.Fatalf("%s after the drained node left: %+v, %v", tb, e, err)
		}
	}
}

// TestPlacementBalancesOntoANewNode adds a fourth node to three that hold
// four tables' groups (four each): the balance moves groups to it until
// every node is named in three.
func TestPlacementBalancesOntoANewNode(t *testing.T) {
	c := newPlacementCluster(t, 3, 53, time.Minute)
	tables := []string{"alpha", "bravo", "charlie", "delta"}
	for _, tb := range tables {
		createVia(c, tb)
		upsertVia(c, tb, "p", "r", 1)
	}
	id, err := retryAny(c, func(s *Store) (uint64, error) { return s.n.AddMember(context.Background(), "sim-4") })
	if err != nil || id != 4 {
		t.Fatalf("AddMember: %d, %v", id, err)
	}
	c.peers = append(c.peers, 4)
	c.startAs(4, vfs.NewMem(), true)
	c.waitVoter(4, 20*time.Second)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l := c.loads(c.leader(10 * time.Second).id)
		if l[1] == 3 && l[2] == 3 && l[3] == 3 && l[4] == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the groups are not balanced: %v", l)
		}
	}
	for _, tb := range tables {
		// The leader's catalog is balanced; a follower may not have
		// applied the last move yet.
		g := c.agreedRanges(tb, 10*time.Second)[0].Group
		c.waitMembers(g.ID, g.Voters, 20*time.Second)
		if e, err := readVia(c, tb, "p", "r"); err != nil || entityN(t, e) != 1 {
			t.Fatalf("%s after the balance: %+v, %v", tb, e, err)
		}
	}
}

// TestLeasesSpread creates six tables through the system group's leader,
// which starts every table's group and so holds all six leases: the
// nodes hand leases over until each holds two, and every table still
// answers.
func TestLeasesSpread(t *testing.T) {
	c := newPlacementCluster(t, 3, 54, time.Minute)
	tables := []string{"one", "two", "three", "four", "five", "six"}
	for _, tb := range tables {
		createVia(c, tb)
	}
	held := func() map[uint64]int {
		out := map[uint64]int{}
		for _, tn := range c.nodes {
			for _, gs := range tn.node.groupStatus() {
				if r := tn.node.testGroup(gs.Group); r != nil && r.holdsLease() {
					out[tn.id]++
				}
			}
		}
		return out
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		h := held()
		if h[1] == 2 && h[2] == 2 && h[3] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leases did not spread: %v", h)
		}
	}
	for i, tb := range tables {
		upsertVia(c, tb, "p", "r", i)
		if e, err := readVia(c, tb, "p", "r"); err != nil || entityN(t, e) != i {
			t.Fatalf("%s after the leases spread: %+v, %v", tb, e, err)
		}
	}
}

// TestLeasesFollowLoad: with the lease counts even, the two tables one
// node leads take all the writes; the node hands one of the two leases to
// another node, so the load is spread too.
func TestLeasesFollowLoad(t *testing.T) {
	// Busy leases may move every 20 ticks, not every 300 election
	// timeouts, so that the stay-put check below gives the balancer many
	// chances to move one back; 20 ms ticks, as spurious elections on a
	// loaded machine move leases too (those the check tells apart).
	const tick, busyEvery = 20 * time.Millisecond, 20
	// Only the hot tables' hand-overs count: a group woken and elected
	// on another node is busy (not quiesced) until it dozes again, and
	// evening the counts out may hand it over.
	var hotGroups sync.Map
	var busyHandOvers atomic.Int64
	// Every table open: the test reads every table's ranges on every node
	// every 20 ms, which through a cache of fewer tables would close the
	// busy ones too, and their load averages with them.
	c := &testCluster{t: t, net: newSimNet(55), nodes: map[uint64]*testNode{}, rangeGroups: true,
		placementInterval: 50 * time.Millisecond, deadAfter: time.Minute, tick: tick, tableCache: 16}
	c.prepare = func(tn *testNode) {
		tn.node.busyLeaseTicks = busyEvery
		tn.node.onBusyHandOver = func(g uint64) {
			if _, hot := hotGroups.Load(g); hot {
				busyHandOvers.Add(1)
			}
		}
	}
	c.startAll(3)
	tables := []string{"one", "two", "three", "four", "five", "six"}
	for _, tb := range tables {
		createVia(c, tb)
	}
	leaders := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, tb := range tables {
			g := c.agreedRanges(tb, 10*time.Second)[0].Group
			for _, tn := range c.nodes {
				if r := tn.node.testGroup(g.ID); r != nil && r.holdsLease() {
					out[tb] = tn.id
				}
			}
		}
		return out
	}
	var hot []string
	for deadline := time.Now().Add(30 * time.Second); hot == nil; time.Sleep(20 * time.Millisecond) {
		byNode := map[uint64][]string{}
		for tb, id := range leaders() {
			byNode[id] = append(byNode[id], tb)
		}
		if len(byNode) == 3 && len(byNode[1]) == 2 && len(byNode[2]) == 2 && len(byNode[3]) == 2 {
			hot = byNode[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease counts did not even out: %v", byNode)
		}
	}
	for _, tb := range hot {
		hotGroups.Store(c.agreedRanges(tb, 10*time.Second)[0].Group.ID, true)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, tb := range hot {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				for _, tn := range c.nodes { // the leader answers; the others refuse
					tn.node.Store().Apply(context.Background(), acct, tb, opUpsert("p", fmt.Sprintf("r%d", i%100), i))
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	apart := func() bool { l := leaders(); return l[hot[0]] != 0 && l[hot[1]] != 0 && l[hot[0]] != l[hot[1]] }
	waitApart := func(deadline time.Time) {
		for ; !apart(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the two busy tables %v are still led by one node: %v", hot, leaders())
			}
		}
	}
	waitApart(time.Now().Add(30 * time.Second))

	// The load stays spread: while the two busy tables are led apart, for
	// many hand-over periods of busy leases, the balancer hands no busy
	// lease over (moving one could only make the loads less even). An
	// election that brings the two together meanwhile (or a hand-over
	// that does, which the next attempt would catch again) starts the
	// window over.
	window := 15 * busyEvery * tick
	for deadline, restarts := time.Now().Add(time.Minute), 0; ; restarts++ {
		waitApart(deadline)
		before, start := busyHandOvers.Load(), time.Now()
		for apart() && time.Since(start) < window {
			time.Sleep(20 * time.Millisecond)
		}
		moved := busyHandOvers.Load() - before
		switch {
		case moved > 0 && apart():
			t.Fatalf("the balancer handed %d busy leases over while the load was spread: %v", moved, leaders())
		case time.Since(start) >= window && moved == 0:
			return // a whole window apart, nothing moved
		case time.Now().After(deadline):
			t.Fatalf("no window of %v with the busy tables led apart in a minute (%d restarts, the last after %d busy hand-overs)", window, restarts, moved)
		}
	}
}

// TestHandOverOrder: evening the lease counts out tries idle groups
// first, dormant ones after them, and the busy ones last, least loaded
// first, whatever order the node holds them in.
func TestHandOverOrder(t *testing.T) {
	mk := func(group uint64, quiesced, dormant bool) *replica {
		r := &replica{group: group}
		r.quiesced.Store(quiesced)
		r.dormantLeader.Store(dormant)
		return r
	}
	led := []*replica{
		mk(1, false, false), mk(2, true, true), mk(3, false, false),
		mk(4, true, false), mk(5, false, false), mk(6, true, false),
	}
	handOverOrder(led, map[uint64]float64{1: 900, 3: 0.5, 5: 40})
	var got []uint64
	for _, r := range led {
		got = append(got, r.group)
	}
	if want := []uint64{4, 6, 2, 3, 5, 1}; !slices.Equal(got, want) {
		t.Fatalf("hand-over order %v, want %v", got, want)
	}
}

// TestPlacementSplitsAlongPartitions fills a table past its stores'
// split size: each store splits the table's range partitions, and the
// system leader splits the table's range group along them, so the table
// ends in several ranges with groups of their own; every entity is read
// back, and a query walks them all in order.
func TestPlacementSplitsAlongPartitions(t *testing.T) {
	c := &testCluster{t: t, net: newSimNet(55), nodes: map[uint64]*testNode{}, rangeGroups: true,
		placementInterval: 50 * time.Millisecond, deadAfter: time.Minute, splitBytes: 16 << 10}
	c.startAll(3)
	createVia(c, "growing")
	pad := strings.Repeat("x", 400)
	var keys []string
	for i := range 200 {
		pk := fmt.Sprintf("p%03d", i)
		e := ent(pk, "r", i)
		e.Properties = append(e.Properties, odata.Property{Name: "Pad", Value: odata.StringValue(pad)})
		if _, err := retryAny(c, func(s *Store) (partition.StoredEntity, error) {
			return s.Apply(context.Background(), acct, "growing", partition.Op{Kind: partition.OpInsertOrReplace, Entity: e})
		}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, pk+"/r")
	}
	var ranges []partition.TableGroup
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ranges = c.agreedRanges("growing", 10*time.Second)
		if len(ranges) >= 2 {
			if _, ok := c.splitDone("growing", starts(ranges)); ok {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the table did not split along its partitions: %+v", ranges)
		}
	}
	for i := range 200 {
		pk := fmt.Sprintf("p%03d", i)
		if e, err := readVia(c, "growing", pk, "r"); err != nil || entityN(t, e) != i {
			t.Fatalf("%s after the split: %+v, %v", pk, e, err)
		}
	}
	if got := walkQuery(c, "growing", partition.EntityQuery{Top: 50}); !slices.Equal(got, keys) {
		t.Fatalf("a query walk read %d entities, want %d", len(got), len(keys))
	}
	t.Logf("%d ranges, starting at %q", len(ranges), starts(ranges))
}

// starts returns the first PartitionKey of each range.
func starts(ranges []partition.TableGroup) []string {
	out := make([]string, len(ranges))
	for i, r := range ranges {
		out[i] = r.Group.Start
	}
	return out
}

// TestVoterNamesNotedOnEveryNode: an operator's naming of a group's
// voters is noted by every node as it applies it (recentNames), so that
// any controller, this leader's or one elected later, leaves the group to
// settle; and it is forgotten once the settle window is over.
func TestVoterNamesNotedOnEveryNode(t *testing.T) {
	c := &testCluster{t: t, net: newSimNet(7), nodes: map[uint64]*testNode{}, rangeGroups: true, placementInterval: time.Second}
	c.startAll(3)
	createVia(c, "named")
	g := c.agreedRanges("named", 10*time.Second)[0].Group
	reversed := slices.Clone(g.Voters)
	slices.Reverse(reversed)
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.n.SetGroupVoters(context.Background(), g.ID, reversed)
	}); err != nil {
		t.Fatal(err)
	}
	c.waitAll("the naming noted", func(tn *testNode) bool {
		_, ok := tn.node.names.since(time.Now())[g.ID]
		return ok
	})
	for _, tn := range c.nodes {
		later := time.Now().Add(settleRounds*time.Second + time.Millisecond)
		if names := tn.node.names.since(later); len(names) != 0 {
			t.Fatalf("node %d still notes %v past the settle window", tn.id, names)
		}
	}
}

// TestRecentNamesForget: names older than the window are forgotten as
// others are noted or read, and a node whose controller never runs keeps
// none.
func TestRecentNamesForget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := recentNames{window: 10 * time.Second}
	for g := range uint64(3000) {
		r.note(g, t0.Add(time.Duration(g)*time.Millisecond))
	}
	if got := len(r.since(t0.Add(3 * time.Second))); got != 3000 {
		t.Fatalf("%d names within the window; want 3000", got)
	}
	r.note(5000, t0.Add(12*time.Second+500*time.Millisecond))
	if got := r.since(t0.Add(12*time.Second + 500*time.Millisecond)); len(got) != 501 || !got[5000].Equal(t0.Add(12*time.Second+500*time.Millisecond)) {
		t.Fatalf("%d names kept after 2.5 s forgotten; want the last 500 and the new one", len(got))
	}
	if len(r.at) != 501 {
		t.Fatalf("%d names held; want 501", len(r.at))
	}
	none := recentNames{}
	none.note(1, t0)
	if got := none.since(t0); len(got) != 0 {
		t.Fatalf("a node with no settle window noted %v", got)
	}
}
