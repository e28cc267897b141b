package cluster

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
)

// TestSnapshotKeptWhileStreamed: a leader keeps a snapshot it made for a
// lagging follower for as long as the follower reads it, however much
// longer than SnapshotKeep that takes (a large store over a slow link),
// and lets it go SnapshotKeep after the last read.
func TestSnapshotKeptWhileStreamed(t *testing.T) {
	c := newTestCluster(t, 3, 31)
	c.snapshotKeep = 20 * time.Millisecond
	c.restartAll()
	ctx := context.Background()
	// The cluster just restarted: leadership may still move, and a write
	// it refuses in passing is retried, as a client would.
	if _, err := retryLeader(c, func(s *Store) (partition.StoredEntity, error) {
		_, err := s.CreateTable(ctx, acct, "snap")
		return partition.StoredEntity{}, err
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := retryLeader(c, func(s *Store) (partition.StoredEntity, error) {
			return s.Apply(ctx, acct, "snap", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent("p", strings.Repeat("k", 100)+string(rune('a'+i%26))+string(rune('a'+i/26)), i)})
		}); err != nil {
			t.Fatal(err)
		}
	}
	ld := c.leader(10 * time.Second)
	take := func() *servedSnapshot {
		var ss *servedSnapshot
		if err := ld.node.onApply(func() (err error) {
			ss, err = ld.node.takeSnapshot()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ss
	}
	first := take()
	pr, pw := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := ld.node.ServeSnapshot(pw, first.token)
		pw.CloseWithError(err)
		served <- err
	}()
	if _, err := io.ReadFull(pr, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * c.snapshotKeep) // a slow follower
	take()                          // a sweep of expired snapshots
	// Still there for a second reader (a follower that reconnects).
	if err := ld.node.ServeSnapshot(io.Discard, first.token); err != nil {
		t.Fatalf("a snapshot being streamed was let go: %v", err)
	}
	n, err := io.Copy(io.Discard, pr)
	if err != nil {
		t.Fatalf("the stream broke after %d bytes: %v", n, err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serving the snapshot: %v", err)
	}
	// Done with, it expires SnapshotKeep later.
	time.Sleep(10 * c.snapshotKeep)
	take()
	if err := ld.node.ServeSnapshot(io.Discard, first.token); err == nil || !strings.Contains(err.Error(), "no such snapshot") {
		t.Fatalf("a snapshot unused for 10× SnapshotKeep is still served: %v", err)
	}
}

// TestIdleReader: a transfer that keeps delivering outlasts the idle
// limit many times over; one that stalls is cancelled.
func TestIdleReader(t *testing.T) {
	const idle = 40 * time.Millisecond
	var cancelled atomic.Bool
	pr, pw := io.Pipe()
	r := newIdleReader(pr, idle, func() { cancelled.Store(true); pr.CloseWithError(errors.New("cancelled")) })
	go func() {
		for range 20 { // 20 × 10 ms: 5 times the idle limit
			pw.Write([]byte("x"))
			time.Sleep(10 * time.Millisecond)
		}
		// then nothing: a stall
	}()
	buf := make([]byte, 1)
	for i := range 20 {
		if _, err := r.Read(buf); err != nil {
			t.Fatalf("read %d of a flowing transfer: %v", i, err)
		}
	}
	if cancelled.Load() {
		t.Fatal("a flowing transfer was cancelled")
	}
	if _, err := r.Read(buf); err == nil || !cancelled.Load() {
		t.Fatalf("a stalled transfer: %v, cancelled %v", err, cancelled.Load())
	}
}
