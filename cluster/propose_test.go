package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/transport"
)

// TestQueuedProposalsShareAnAppend queues writes to a range group while
// its leader's loop is busy, then lets the loop take them: they go to
// raft as one proposal, so each follower gets one append carrying them
// all. Proposed one by one, each write was an append of its own to every
// follower.
func TestQueuedProposalsShareAnAppend(t *testing.T) {
	c := newTablesCluster(t, 3, 31)
	createVia(c, "batched")
	g := c.tableGroup("batched").ID
	upsertVia(c, "batched", "p", "first", 0)
	ld := c.groupLeader(g, 10*time.Second)

	var mu sync.Mutex
	appends := map[uint64]int{} // follower -> appends with entries
	counting := false
	c.net.mu.Lock()
	c.net.observe = func(from uint64, m transport.Message) {
		if from == ld.id && m.Group == g && m.Raft.GetType() == raftpb.MessageType_MsgApp && len(m.Raft.GetEntries()) > 0 {
			mu.Lock()
			if counting {
				appends[transport.NodeOf(m.Raft.GetTo())]++
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
	mu.Lock()
	counting = true
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
	for to, n := range appends {
		// One append for the run; a second only if raft had to probe.
		if n > 2 {
			t.Errorf("follower %d got %d appends with entries for %d queued writes, want at most 2", to, n, writes)
		}
	}
}
