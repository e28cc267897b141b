package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/transport"
)

// newWrittenTable starts a three-node cluster whose table has a range
// group, written once, and returns the group and its leader.
func newWrittenTable(t *testing.T, seed uint64, table string) (*testCluster, uint64, *testNode) {
	t.Helper()
	return writtenTableOn(newTablesCluster(t, 3, seed), table)
}

// writtenTableOn creates table on c, writes it once, and returns its
// group and the group's leader.
func writtenTableOn(c *testCluster, table string) (*testCluster, uint64, *testNode) {
	c.t.Helper()
	createVia(c, table)
	g := c.tableGroup(table).ID
	upsertVia(c, table, "p", "first", 0)
	return c, g, c.groupLeader(g, 10*time.Second)
}

// TestQueuedProposalsShareAnAppend queues writes to a range group while
// its leader's loop is busy, then lets the loop take them: they go to
// raft as one proposal, so every append to a follower that carries any of
// their entries carries them all. Proposed one by one, each write was an
// append of its own to every follower. (Counting the appends instead
// failed 2-6 times in 40 under -race: raft sends a lagging or probed
// follower the same entries again, with the entry before them.)
func TestQueuedProposalsShareAnAppend(t *testing.T) {
	c, g, ld := newWrittenTable(t, 31, "batched")

	var mu sync.Mutex
	appends := map[uint64][]int{} // follower -> the queued writes' entries in each append carrying any
	var before uint64             // the leader's last index before the writes
	counting := false
	c.net.mu.Lock()
	c.net.observe = func(from uint64, m transport.Message) {
		if from == ld.id && m.Group == g && m.Raft.GetType() == raftpb.MessageType_MsgApp && len(m.Raft.GetEntries()) > 0 {
			mu.Lock()
			if counting {
				queued := 0
				for _, e := range m.Raft.GetEntries() {
					if e.GetIndex() > before {
						queued++
					}
				}
				if queued > 0 {
					to := transport.NodeOf(m.Raft.GetTo())
					appends[to] = append(appends[to], queued)
				}
			}
			mu.Unlock()
		}
	}
	c.net.mu.Unlock()

	entered, release := make(chan struct{}), make(chan struct{})
	ld.node.calls <- func() { close(entered); <-release }
	<-entered
	const writes = 8
	errs := make(chan error, writes)
	for i := range writes {
		go func() {
			_, err := ld.node.applyInGroup(context.Background(), g, acct, "batched", opUpsert("p", string(rune('a'+i)), i))
			errs <- err
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); len(ld.node.proposes) < writes; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("%d of %d writes queued for the loop after 10 s", len(ld.node.proposes), writes)
		}
	}
	last, err := ld.logGroup(g).LastIndex()
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	mu.Lock()
	before, counting = last, true
	mu.Unlock()
	close(release)
	for range writes {
		if err := <-errs; err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	// A follower raft was probing gets its append once it answers a
	// heartbeat, maybe after the other one's answers ended the writes.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(appends)
		mu.Unlock()
		if n == 2 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(appends) != 2 {
		t.Fatalf("appends with entries went to %d followers (%v), want 2", len(appends), appends)
	}
	for to, carried := range appends {
		for _, n := range carried {
			if n != writes {
				t.Errorf("follower %d got appends carrying %v of the %d queued writes' entries, want all of them in each", to, carried, writes)
				break
			}
		}
	}
}
