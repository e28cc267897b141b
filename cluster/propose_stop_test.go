package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
)

// newStoppingCluster is newWrittenTable on nodes whose requests wait a
// minute and whose loops may hold proposals back as long: a write then
// waits for what the test does to its node, not for its time to run out.
func newStoppingCluster(t *testing.T, seed uint64, table string) (*testCluster, uint64, *testNode) {
	t.Helper()
	c := &testCluster{t: t, net: newSimNet(seed), nodes: map[uint64]*testNode{}, rangeGroups: true,
		prepare: func(tn *testNode) {
			tn.node.cfg.RequestTimeout = time.Minute
			tn.node.gather.limit = time.Minute
		}}
	c.startAll(3)
	return writtenTableOn(c, table)
}

// TestStoppedLeaderRefusesWritesItNeverProposed stops a leader whose loop
// holds writes back (its gather expects more writers) and has writes
// queued for it: raft took none of them, so each is refused with
// ServerBusy, which tells the client nothing was written, and not
// OperationTimedOut (its outcome unknown), as they were before. The
// group's next leader then finds none of them.
func TestStoppedLeaderRefusesWritesItNeverProposed(t *testing.T) {
	c, g, ld := newStoppingCluster(t, 43, "stopped")
	for _, tn := range c.nodes {
		tn.paused.Store(true) // no tick or heartbeat moves the loop on
	}

	entered, release := make(chan struct{}), make(chan struct{})
	ld.node.calls <- func() {
		ld.node.gather.lastWrite = time.Minute // held for the gather's limit
		ld.node.gather.answered.Add(1000)
		close(entered)
		<-release
	}
	<-entered
	const writes = 8
	errs := make(chan error, writes)
	for i := range writes {
		go func() {
			_, err := ld.node.applyInGroup(context.Background(), g, acct, "stopped", opUpsert("p", fmt.Sprint("w", i), i))
			errs <- err
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); len(ld.node.proposes) < writes; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("%d of %d writes queued for the loop after 10 s", len(ld.node.proposes), writes)
		}
	}
	// The loop takes the writes when the call returns, holds them back,
	// and then finds its context done.
	ld.cancel()
	close(release)
	for range writes {
		err := <-errs
		if codeOf(err) != "ServerBusy" || !errors.Is(err, ErrStopped) {
			t.Fatalf("a write the stopped leader never proposed: %v, want ServerBusy and ErrStopped", err)
		}
	}

	c.stop(ld.id)
	for _, tn := range c.nodes {
		tn.paused.Store(false)
	}
	for i := range writes {
		if _, err := readVia(c, "stopped", "p", fmt.Sprint("w", i)); codeOf(err) != partition.CodeResourceNotFound {
			t.Fatalf("write w%d, refused as never written, read at the next leader: %v", i, err)
		}
	}
	if _, err := readVia(c, "stopped", "p", "first"); err != nil {
		t.Fatalf("the write before: %v", err)
	}
}

// TestStoppedLeaderLeavesProposedWritesAmbiguous stops a leader cut off
// from its followers after raft took a write: the entry may reach the
// group's next leader, so the write is answered OperationTimedOut (its
// outcome unknown), never ServerBusy.
func TestStoppedLeaderLeavesProposedWritesAmbiguous(t *testing.T) {
	c, g, ld := newStoppingCluster(t, 44, "cutoff")
	var others []uint64
	for id := range c.nodes {
		if id != ld.id {
			others = append(others, id)
		}
	}
	before, err := ld.logGroup(g).LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	c.net.partition([]uint64{ld.id}, others)
	errc := make(chan error, 1)
	go func() {
		_, err := ld.node.applyInGroup(context.Background(), g, acct, "cutoff", opUpsert("p", "cut", 1))
		errc <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		last, err := ld.logGroup(g).LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		if last > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cut-off leader did not append the write in 10 s")
		}
	}
	c.stop(ld.id)
	if err := <-errc; codeOf(err) != "OperationTimedOut" {
		t.Fatalf("a write raft took, its leader stopped: %v, want OperationTimedOut", err)
	}
}
