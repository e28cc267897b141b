package lsm

import (
	"strings"
	"sync"
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

// syncGatedFS holds every sstable's Sync until the gate opens: a flush
// reads its memtables through, then waits to finish its table.
type syncGatedFS struct {
	vfs.FS
	gate chan struct{}
}

type syncGatedFile struct {
	vfs.File
	gate chan struct{}
}

func (g *syncGatedFS) Create(name string) (vfs.File, error) {
	f, err := g.FS.Create(name)
	if err != nil || !strings.HasSuffix(name, ".sst") {
		return f, err
	}
	return &syncGatedFile{File: f, gate: g.gate}, nil
}

func (f *syncGatedFile) Sync() error {
	<-f.gate
	return f.File.Sync()
}

// TestCloseWakesHeldWriter: a writer held back for a flush that cannot
// finish, stalled at a rotation (holding the commit lock Close needs) or
// paced before it, must be failed by Close rather than wait for the
// flush. Flushes that cannot start hold the writer at the pace (the
// memtable after the flushing one takes nothing until the flush reads
// its memtable); flushes that read their memtables but cannot finish
// their tables let it fill and stall at the rotation.
func TestCloseWakesHeldWriter(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   func(gate chan struct{}) vfs.FS
		held func(Metrics) bool
	}{
		{"paced", func(gate chan struct{}) vfs.FS { return &gatedFS{FS: vfs.NewMem(), gate: gate} },
			func(m Metrics) bool { return m.Pace.Count > 0 }},
		{"stalled", func(gate chan struct{}) vfs.FS { return &syncGatedFS{FS: vfs.NewMem(), gate: gate} },
			func(m Metrics) bool { return m.Stall.Count > 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := make(chan struct{})
			var release sync.Once
			open := func() { release.Do(func() { close(gate) }) }
			defer open()
			opts := smallOptions()
			opts.FS = tc.fs(gate)
			db, err := Open("/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			writeErr := make(chan error, 1)
			go func() {
				for i := 0; ; i++ {
					if err := db.Set(faultKey(i), faultValue(i), &WriteOptions{}); err != nil {
						writeErr <- err
						return
					}
				}
			}()
			for deadline := time.Now().Add(10 * time.Second); !tc.held(db.Metrics()); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the writer was never held: %+v, %+v", db.Metrics().Pace, db.Metrics().Stall)
				}
			}
			closed := make(chan error, 1)
			go func() { closed <- db.Close() }()
			select {
			case err := <-writeErr:
				if err != ErrClosed {
					t.Fatalf("the held write returned %v, want ErrClosed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Close left the held writer waiting for the flush")
			}
			open() // the flush under way, which Close waits for, may end
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Close hung")
			}
		})
	}
}
