package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
)

func opUpsert(pk, rk string, n int) partition.Op {
	return partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent(pk, rk, n)}
}

// startIdleRangeGroup starts three nodes hosting one range group, writes
// one entity through it and waits until every replica is quiesced. It
// returns the cluster, the group and what the stores hold.
func startIdleRangeGroup(t *testing.T, seed uint64) (*testCluster, uint64, map[string]int) {
	t.Helper()
	c := newRangeCluster(t, 3, seed, 1)
	c.createRangesTable()
	g := c.groups[0]
	c.writeInGroup(g, "p", "first", 1)
	c.waitQuiesced(10 * time.Second)
	return c, g, map[string]int{"p/first": 1}
}

// othersThan returns the running nodes but id.
func othersThan(c *testCluster, id uint64) []uint64 {
	var out []uint64
	for other := range c.nodes {
		if other != id {
			out = append(out, other)
		}
	}
	return out
}

// waitGroupQuiesced waits until node id's replica of group g is quiesced.
func (c *testCluster) waitGroupQuiesced(id, g uint64, timeout time.Duration) {
	c.t.Helper()
	for deadline := time.Now().Add(timeout); !c.nodes[id].node.testGroup(g).quiesced.Load(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Fatalf("node %d: group %d not quiesced after %v", id, g, timeout)
		}
	}
}

// TestReviewRangeFollowerCatchesUpAfterManyWrites stops a follower of a
// range group while the group takes more writes than the log keeps
// (SyncEvery 50, LogRetention 30 in the tests), then starts it again: it
// must catch up. A group hostGroup was given has no table whose span it
// could send as a snapshot, so its log must not be compacted.
func TestReviewRangeFollowerCatchesUpAfterManyWrites(t *testing.T) {
	c, g, want := startIdleRangeGroup(t, 31)
	lag := otherThan(c, c.groupLeader(g, 10*time.Second).id)
	fs := c.nodes[lag].fs
	c.stop(lag)
	for i := range 120 {
		rk := fmt.Sprintf("r%03d", i)
		c.writeInGroup(g, "p", rk, i)
		want["p/"+rk] = i
	}
	c.start(lag, fs)
	c.waitStores(want, 10*time.Second)
}

// TestReviewQuiescedGroupElectsWhenItsLeaderIsRemoved removes from the
// cluster the node that leads a quiesced range group. The node stops; the
// group's other two voters are a quorum of its (fixed) voters and must
// elect, though the removed node is no longer among the system group's
// members, whose liveness the nodes watch.
func TestReviewQuiescedGroupElectsWhenItsLeaderIsRemoved(t *testing.T) {
	c, g, want := startIdleRangeGroup(t, 32)
	x := c.groupLeader(g, time.Second).id
	if err := c.removeMember(x); err != nil {
		t.Fatal(err)
	}
	waitRemoved(t, c.nodes[x], 10*time.Second)
	c.stop(x)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		led := false
		for _, tn := range c.nodes {
			led = led || tn.node.testGroup(g).ready.Load()
		}
		if led {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %d elected no leader in 5 s after its leader, node %d, was removed", g, x)
		}
	}
	c.writeInGroup(g, "p", "second", 2)
	want["p/second"] = 2
	c.waitStores(want, 10*time.Second)
}

// TestReviewQuiescedFollowerMissesAWriteInABlip cuts a quiesced follower
// off for less than an election timeout, while its group takes a write
// and quiesces again. Once the link is back the follower must catch up:
// it has not seen its leader fall silent, so nothing but the leader can
// bring it the write.
func TestReviewQuiescedFollowerMissesAWriteInABlip(t *testing.T) {
	c, g, want := startIdleRangeGroup(t, 33)
	ld := c.groupLeader(g, time.Second)
	lag := otherThan(c, ld.id)
	c.net.partition([]uint64{lag}, othersThan(c, lag))
	c.writeInGroup(g, "p", "second", 2)
	want["p/second"] = 2
	// The leader goes quiet again (or keeps ticking until the blip is
	// over, which is as good), then the link comes back: well within the
	// ten ticks of an election timeout.
	for deadline := time.Now().Add(30 * time.Millisecond); time.Now().Before(deadline) && !ld.node.testGroup(g).quiesced.Load(); {
		time.Sleep(time.Millisecond)
	}
	c.net.heal()
	c.waitStores(want, 5*time.Second)
}

// TestReviewStalledFollowerMissesAWrite stalls a quiesced follower (its
// clock stops, as in a long pause) and cuts it off, while its group takes
// a write and quiesces without it. Once it runs again and the link is
// back, it must catch up: it never saw its leader fall silent, and the
// leader saw it fall silent and come back.
func TestReviewStalledFollowerMissesAWrite(t *testing.T) {
	c, g, want := startIdleRangeGroup(t, 34)
	ld := c.groupLeader(g, time.Second)
	lag := c.nodes[otherThan(c, ld.id)]
	lag.paused.Store(true)
	c.net.partition([]uint64{lag.id}, othersThan(c, lag.id))
	c.writeInGroup(g, "p", "second", 2)
	want["p/second"] = 2
	time.Sleep(30 * c.tickInterval()) // the leader finds the follower silent
	c.waitGroupQuiesced(ld.id, g, 5*time.Second)
	c.net.heal()
	lag.paused.Store(false)
	c.waitStores(want, 5*time.Second)
}

// TestReviewPartitionedQuiescedLeaderStepsDown cuts off the node leading a
// quiesced range group: the others elect a new leader and take a write,
// the old one steps down (it wakes when its followers fall silent, and
// CheckQuorum deposes it), and it never answers a read meanwhile.
func TestReviewPartitionedQuiescedLeaderStepsDown(t *testing.T) {
	c, g, want := startIdleRangeGroup(t, 35)
	old := c.groupLeader(g, time.Second)
	c.net.partition([]uint64{old.id}, othersThan(c, old.id))
	var nl *testNode
	for deadline := time.Now().Add(10 * time.Second); nl == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the majority elected no leader")
		}
		for _, id := range othersThan(c, old.id) {
			if c.nodes[id].node.testGroup(g).ready.Load() {
				nl = c.nodes[id]
			}
		}
	}
	if _, err := nl.node.applyInGroup(context.Background(), g, acct, "ranges", opUpsert("p", "first", 2)); err != nil {
		t.Fatal(err)
	}
	want["p/first"] = 2
	if got, err := old.node.getInGroup(context.Background(), g, acct, "ranges", "p", "first"); err == nil {
		t.Fatalf("the cut-off leader answered a read: N=%d", entityN(t, got))
	}
	for deadline := time.Now().Add(5 * time.Second); old.node.testGroup(g).ready.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cut-off leader still leads after 5 s")
		}
	}
	c.net.heal()
	c.waitStores(want, 5*time.Second)
}

// TestReviewQuiescedLeaderRestartsQuickly restarts the node leading a
// quiesced range group faster than an election timeout: its followers
// never find it silent, and it comes back as a follower that knows no
// leader. Its campaign (a pre-vote the followers refuse while they think
// their leader's lease holds) wakes them, and the group elects.
func TestReviewQuiescedLeaderRestartsQuickly(t *testing.T) {
	c, g, want := startIdleRangeGroup(t, 36)
	old := c.groupLeader(g, time.Second)
	fs := old.fs
	c.stop(old.id)
	c.start(old.id, fs)
	c.writeInGroup(g, "p", "second", 2)
	want["p/second"] = 2
	c.waitStores(want, 5*time.Second)
}

// TestStalledQuiescedLeaderStepsDown stalls the node that leads a
// quiesced range group (its raft clock stops) and cuts it off: the
// others elect a new leader, which quiesces too. Once the stalled node
// runs again, it must not go on believing it leads: the new leader,
// quiesced, wakes when it hears the stalled node again (a voter back),
// and its heartbeat deposes it.
func TestStalledQuiescedLeaderStepsDown(t *testing.T) {
	c, g, _ := startIdleRangeGroup(t, 33)
	old := c.groupLeader(g, 10*time.Second)
	old.paused.Store(true)
	c.net.partition([]uint64{old.id}, othersThan(c, old.id))
	var next *testNode
	for deadline := time.Now().Add(10 * time.Second); next == nil; time.Sleep(5 * time.Millisecond) {
		for _, tn := range c.nodes {
			if tn.id != old.id && tn.node.testGroup(g).ready.Load() {
				next = tn
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the others elected no leader")
		}
	}
	c.waitGroupQuiesced(next.id, g, 10*time.Second)
	if !old.node.testGroup(g).ready.Load() {
		t.Fatal("the stalled node stepped down while it stood still: the test stalls nothing")
	}
	c.net.heal()
	old.paused.Store(false)
	for deadline := time.Now().Add(5 * time.Second); old.node.testGroup(g).ready.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the node that stalled still believes it leads the group")
		}
	}
}

// TestIdleGroupDropsItsEntryCache: once a range group that took writes
// is idle (quiesced), no replica keeps its recent entries in memory, so
// that a node's memory is not held by the last writes of every range it
// ever served (raftlog.Storage.DropCache).
func TestIdleGroupDropsItsEntryCache(t *testing.T) {
	c, g, _ := startIdleRangeGroup(t, 37)
	for i := range 20 {
		c.writeInGroup(g, "p", fmt.Sprintf("row%02d", i), i)
	}
	c.waitQuiesced(10 * time.Second)
	for id, tn := range c.nodes {
		if b := tn.node.testGroup(g).rlog.CachedBytes(); b != 0 {
			t.Errorf("node %d: the idle group still caches %d bytes of entries", id, b)
		}
	}
}
