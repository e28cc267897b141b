package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/internal/rusage"
)

// waitDormant waits until every replica of the range groups has dropped
// its raft state, the leaders' too.
func (c *testCluster) waitDormant(timeout time.Duration) { c.waitDormantBut(0, timeout) }

// waitDormantBut is waitDormant for all replicas but slack of them (the
// lease balancer wakes a dormant leader now and then to hand its lease
// over).
func (c *testCluster) waitDormantBut(slack int, timeout time.Duration) {
	c.t.Helper()
	want := len(c.groups)*len(c.nodes) - slack
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		dormant := 0
		for _, tn := range c.nodes {
			dormant += tn.node.Status().Dormant
		}
		if dormant >= want {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d range replicas dormant after %v, want %d", dormant, timeout, want)
		}
	}
}

// newDormantGroup starts three nodes and a table with one range group,
// written once and left to go dormant; it returns the group and the
// node of its dormant leader.
func newDormantGroup(t *testing.T, seed uint64) (c *testCluster, g uint64, ld *testNode) {
	t.Helper()
	c = newRangeCluster(t, 3, seed, 1)
	c.createRangesTable()
	g = c.groups[0]
	c.writeInGroup(g, "p", "r", 1)
	c.waitDormant(10 * time.Second)
	return c, g, c.groupLeader(g, time.Second)
}

// onLoop runs f on the node's loop and waits for it.
func onLoop(t *testing.T, tn *testNode, f func()) {
	t.Helper()
	done := make(chan struct{})
	select {
	case tn.node.calls <- func() { f(); close(done) }:
	case <-time.After(10 * time.Second):
		t.Fatalf("node %d: the loop took no call in 10 s", tn.id)
	}
	<-done
}

// askDormantVote steps into voter's replica of group g, which must be
// dormant, a vote request from member cand for the term after the
// replica's, as up to date as its log; ctx is the request's context (a
// leader transfer's mark, or none). It runs on the voter's loop and
// returns that term and the replica's vote and term after the step.
func askDormantVote(t *testing.T, voter *testNode, g, cand uint64, ctx []byte) (term, vote, voteTerm uint64) {
	t.Helper()
	onLoop(t, voter, func() {
		r := voter.node.testGroup(g)
		if !r.dormant() {
			t.Errorf("node %d's replica of group %d is not dormant", voter.id, g)
			return
		}
		last, err := r.storage.LastIndex()
		if err != nil {
			t.Error(err)
			return
		}
		lastTerm, err := r.storage.Term(last)
		if err != nil {
			t.Error(err)
			return
		}
		hs, _, err := r.storage.InitialState()
		if err != nil {
			t.Error(err)
			return
		}
		term = hs.GetTerm() + 1
		r.step([]*raftpb.Message{{
			Type: raftpb.MessageType_MsgVote.Enum(), From: proto.Uint64(cand), To: proto.Uint64(r.id),
			Term: proto.Uint64(term), LogTerm: proto.Uint64(lastTerm), Index: proto.Uint64(last), Context: ctx,
		}})
		if !r.guardingVotes() {
			t.Errorf("the woken follower is not guarding its vote: the test proves nothing")
		}
		st := r.rawNode().BasicStatus()
		vote, voteTerm = st.GetVote(), st.GetTerm()
	})
	return term, vote, voteTerm
}

// TestWokenFollowerGuardsItsVote: a follower woken from dormancy by a
// candidate's vote request, while its leader's node is live, refuses the
// vote, as it would have before it dropped its raft state: its leader
// may hold a read lease that counts on it. Raft started again has
// forgotten its leader and would grant it.
func TestWokenFollowerGuardsItsVote(t *testing.T) {
	c, g, ld := newDormantGroup(t, 15)
	var voter, candidate *testNode
	for _, tn := range c.nodes {
		switch {
		case tn == ld:
		case voter == nil:
			voter = tn
		default:
			candidate = tn
		}
	}
	cand := candidate.node.testGroup(g).id
	if _, vote, term := askDormantVote(t, voter, g, cand, nil); vote == cand {
		t.Errorf("the woken follower voted for %x in term %d while its leader's node is live", cand, term)
	}
	// The group goes on under its leader.
	c.writeInGroup(g, "p", "r2", 2)
	if got := c.groupLeader(g, time.Second); got != ld {
		t.Fatalf("group %d's leader moved from node %d to %d", g, ld.id, got.id)
	}
}

// TestDormantReplicasWake: idle groups' replicas, leaders too, drop their
// raft state; the next read or write wakes them, the leader elected again
// at once, and it sees what was written before; a node whose dormant
// leaders die has its groups elect others.
func TestDormantReplicasWake(t *testing.T) {
	c := newRangeCluster(t, 3, 16, 6)
	c.createRangesTable()
	want := map[string]int{}
	for _, g := range c.groups {
		c.writeInGroup(g, fmt.Sprintf("g%d", g), "first", int(g))
		want[fmt.Sprintf("g%d/first", g)] = int(g)
	}
	c.waitDormant(10 * time.Second)
	for _, g := range c.groups {
		ld := c.groupLeader(g, time.Second)
		if r := ld.node.testGroup(g); !r.dormantLeader.Load() || r.ready.Load() {
			t.Fatalf("group %d: node %d's replica is not a dormant leader (ready %v)", g, ld.id, r.ready.Load())
		}
	}
	var wakes uint64
	for _, tn := range c.nodes {
		wakes += tn.node.Status().DormantWakes
	}
	// Half the groups are woken by a read, half by a write; either sees
	// what was written before the group went dormant.
	for i, g := range c.groups {
		if i%2 == 0 {
			if got := entityN(t, c.readInGroup(g, fmt.Sprintf("g%d", g), "first")); got != int(g) {
				t.Fatalf("group %d: read %d after waking, want %d", g, got, g)
			}
		} else {
			c.writeInGroup(g, fmt.Sprintf("g%d", g), "second", int(g)+100)
			want[fmt.Sprintf("g%d/second", g)] = int(g) + 100
		}
	}
	var woken uint64
	for _, tn := range c.nodes {
		woken += tn.node.Status().DormantWakes
	}
	if woken <= wakes {
		t.Fatalf("dormant wakes %d before the requests, %d after: no replica was woken", wakes, woken)
	}
	c.waitStores(want, 10*time.Second)
	c.waitDormant(10 * time.Second)

	victim, led := c.crashBusiestLeader()
	for _, g := range led {
		c.writeInGroup(g, fmt.Sprintf("g%d", g), "third", int(g)+200)
		want[fmt.Sprintf("g%d/third", g)] = int(g) + 200
		if ld := c.groupLeader(g, time.Second); ld.id == victim {
			t.Fatalf("group %d is led by the dead node", g)
		}
	}
	c.waitStores(want, 10*time.Second)
}

// TestWokenFollowerVotesForItsLeader: a follower woken from dormancy
// while its leader's node is live grants its vote to that leader standing
// again (a dormant leader woken, reelect), whose lease is the only one the
// vote could count in; it refuses any other candidate
// (TestWokenFollowerGuardsItsVote).
func TestWokenFollowerVotesForItsLeader(t *testing.T) {
	c, g, ld := newDormantGroup(t, 17)
	var voter *testNode
	for _, tn := range c.nodes {
		if tn != ld {
			voter = tn
			break
		}
	}
	cand := ld.node.testGroup(g).id
	if term, vote, voteTerm := askDormantVote(t, voter, g, cand, []byte("CampaignTransfer")); vote != cand || voteTerm != term {
		t.Errorf("the woken follower's vote in term %d is %x, want its leader %x standing again in term %d", voteTerm, vote, cand, term)
	}
	// The vote above was cast for a candidate that is not standing: the
	// group elects a leader again when its real replicas wake.
	c.writeInGroup(g, "p", "r2", 2)
}

// BenchmarkDormantLeaderWake: the first write to a group whose replicas
// are all dormant (or unloaded too: unload.go) waits for its leader to be
// woken (loaded first) and elected again; the next write finds it awake.
// It reports both, per write, in the same run (wake-ms, awake-ms). The
// client here repeats a refused write every 10 ms (inGroup), the front
// end after 5, 10, 20 ms and on.
func BenchmarkDormantLeaderWake(b *testing.B) {
	for _, unload := range []bool{false, true} {
		name := "dormant"
		if unload {
			name = "unloaded"
		}
		b.Run(name, func(b *testing.B) { benchmarkDormantLeaderWake(b, unload) })
	}
}

func benchmarkDormantLeaderWake(b *testing.B, unload bool) {
	var prepare func(*testNode)
	if !unload {
		prepare = func(tn *testNode) { tn.node.unloadTicks = -1 }
	}
	c := prepareRangeCluster(b, 3, 18, 1, 0, prepare)
	c.createRangesTable()
	g := c.groups[0]
	c.writeInGroup(g, "p", "r", 0)
	var wake, awake time.Duration
	for i := range b.N {
		b.StopTimer()
		c.waitDormant(10 * time.Second)
		if unload {
			c.waitUnloaded(0, 10*time.Second)
		}
		b.StartTimer()
		start := time.Now()
		c.writeInGroup(g, "p", "r", i)
		wake += time.Since(start)
		start = time.Now()
		c.writeInGroup(g, "p", "r", i)
		awake += time.Since(start)
	}
	perWrite := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(b.N) }
	b.ReportMetric(perWrite(wake), "wake-ms")
	b.ReportMetric(perWrite(awake), "awake-ms")
}

// BenchmarkNodeBackAmongDormantGroups: a node that comes back wakes the
// dormant leaders of its groups, each with an election (mustWake,
// reelect). Three nodes in one process host 1,000 idle groups, all
// dormant, with the default tick (100 ms); one node crashes and starts
// again, and the benchmark times how long the groups take to be dormant
// again (quiet-s) and the process's CPU meanwhile (cpu-s), restart
// included.
func BenchmarkNodeBackAmongDormantGroups(b *testing.B) {
	const groups = 1_000
	c := startRangeCluster(b, 3, 1, groups, 100*time.Millisecond)
	for _, g := range c.groups {
		c.groupLeader(g, 5*time.Minute)
	}
	c.waitDormant(5 * time.Minute)
	var quiet, cpu time.Duration
	for range b.N {
		start, cpu0 := time.Now(), rusage.CPU()
		c.start(3, c.crash(3, nil))
		c.waitDormant(5 * time.Minute)
		quiet += time.Since(start)
		cpu += rusage.CPU() - cpu0
	}
	b.ReportMetric(quiet.Seconds()/float64(b.N), "quiet-s")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s")
}

// TestAwaitWakeEndsWhenTheNodeStops: a request waiting for a dormant
// leader to wake (a lease transfer asked with no deadline) ends when the
// node stops rather than ask the stopped loop forever.
func TestAwaitWakeEndsWhenTheNodeStops(t *testing.T) {
	c, g, ld := newDormantGroup(t, 17)
	r := ld.node.testGroup(g)
	if !r.dormantLeader.Load() {
		t.Fatalf("node %d's replica of group %d is no dormant leader: the test proves nothing", ld.id, g)
	}
	c.stop(ld.id)
	woke := make(chan bool, 1)
	go func() { woke <- r.awaitWake(context.Background()) }()
	select {
	case ok := <-woke:
		if ok {
			t.Fatal("a stopped node's replica woke as the ready leader")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("awaitWake still waits 10 s after the node stopped")
	}
}
