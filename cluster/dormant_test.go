package cluster

import (
	"fmt"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// waitDormant waits until every follower of the range groups has dropped
// its raft state: all replicas but each group's leader.
func (c *testCluster) waitDormant(timeout time.Duration) {
	c.t.Helper()
	want := len(c.groups) * (len(c.nodes) - 1)
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		dormant := 0
		for _, tn := range c.nodes {
			dormant += tn.node.Status().Dormant
		}
		if dormant == want {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d range replicas dormant after %v, want %d (every follower)", dormant, timeout, want)
		}
	}
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

// TestDormantFollowersWake: idle groups' followers drop their raft state,
// and take it up again for the next write, and to elect a leader when
// theirs dies.
func TestDormantFollowersWake(t *testing.T) {
	c := newRangeCluster(t, 3, 14, 6)
	c.createRangesTable()
	want := map[string]int{}
	for _, g := range c.groups {
		c.writeInGroup(g, fmt.Sprintf("g%d", g), "first", int(g))
		want[fmt.Sprintf("g%d/first", g)] = int(g)
	}
	c.waitDormant(10 * time.Second)
	for _, g := range c.groups {
		c.writeInGroup(g, fmt.Sprintf("g%d", g), "second", int(g)+100)
		want[fmt.Sprintf("g%d/second", g)] = int(g) + 100
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

// TestWokenFollowerGuardsItsVote: a follower woken from dormancy by a
// candidate's vote request, while its leader's node is live, refuses the
// vote, as it would have before it dropped its raft state: its leader
// may hold a read lease that counts on it. Raft started again has
// forgotten its leader and would grant it.
func TestWokenFollowerGuardsItsVote(t *testing.T) {
	c := newRangeCluster(t, 3, 15, 1)
	c.createRangesTable()
	g := c.groups[0]
	c.writeInGroup(g, "p", "r", 1)
	c.waitDormant(10 * time.Second)
	ld := c.groupLeader(g, time.Second)
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
	cand := candidate.node.group(g).id
	onLoop(t, voter, func() {
		r := voter.node.group(g)
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
		term := hs.GetTerm() + 1
		r.step([]*raftpb.Message{{
			Type: raftpb.MessageType_MsgVote.Enum(), From: proto.Uint64(cand), To: proto.Uint64(r.id),
			Term: proto.Uint64(term), LogTerm: proto.Uint64(lastTerm), Index: proto.Uint64(last),
		}})
		if st := r.rawNode().BasicStatus(); st.GetVote() == cand {
			t.Errorf("the woken follower voted for %x in term %d while its leader's node is live", cand, st.GetTerm())
		}
	})
	// The group goes on under its leader.
	c.writeInGroup(g, "p", "r2", 2)
	if got := c.groupLeader(g, time.Second); got != ld {
		t.Fatalf("group %d's leader moved from node %d to %d", g, ld.id, got.id)
	}
}
