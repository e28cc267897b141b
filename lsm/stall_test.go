package lsm

import (
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// TestNoL0StallWithoutBackgroundCompactions: with automatic compactions
// off nothing but a manual Compact shrinks L0, and a writer stalled on L0
// would hold the commit lock Compact needs, so writes must not stall on
// L0's size. (They used to hang for good once L0 reached its stop
// threshold.)
func TestNoL0StallWithoutBackgroundCompactions(t *testing.T) {
	opts := smallOptions()
	opts.FS = vfs.NewMem()
	opts.DisableBackgroundCompactions = true
	opts.L0CompactionThreshold, opts.L0StopWritesThreshold = 2, 3
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	done := make(chan error, 1)
	go func() {
		for i := range 3000 { // about a dozen memtables
			if err := db.Set(faultKey(i), faultValue(i), &WriteOptions{}); err != nil {
				done <- err
				return
			}
		}
		done <- db.Compact(nil, nil)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("writes hung with %d L0 tables", db.Metrics().Levels[0].Files)
	}
	if n := db.Metrics().Levels[0].Files; n != 0 {
		t.Fatalf("%d L0 tables after a full compaction", n)
	}
}

// TestCloseWakesStalledWriter: a writer stalled waiting for room holds the
// commit lock Close needs; Close must fail it rather than wait for a flush.
func TestCloseWakesStalledWriter(t *testing.T) {
	opts := smallOptions()
	opts.FS = vfs.NewMem()
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	// No memtable may wait for flush: the first rotation stalls for good.
	db.mu.Lock()
	db.opts.MemTableStopWritesThreshold = 0
	db.mu.Unlock()
	writeErr := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if err := db.Set(faultKey(i), faultValue(i), &WriteOptions{}); err != nil {
				writeErr <- err
				return
			}
		}
	}()
	for db.Metrics().Stall.Count == 0 {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung behind a stalled writer")
	}
	if err := <-writeErr; err != ErrClosed {
		t.Fatalf("the stalled write returned %v, want ErrClosed", err)
	}
}
