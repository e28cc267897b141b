package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"
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
