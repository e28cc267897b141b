package raftlog

import (
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

func commit(t *testing.T, l *Log, sync bool, fill func(w *Write)) {
	t.Helper()
	w := l.NewWrite()
	fill(w)
	if err := w.Commit(sync); err != nil {
		t.Fatal(err)
	}
}

func hardState(term, vote, commit uint64) *pb.HardState {
	return &pb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(vote), Commit: proto.Uint64(commit)}
}

// TestBootstrap checks that Bootstrap writes a durable ConfState with an
// empty log, and refuses a group with any state, also after a reopen.
func TestBootstrap(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, testOptions(fs, 0))
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	if err := l.mustGroup(1).Bootstrap(cs); err != nil {
		t.Fatal(err)
	}
	if err := l.mustGroup(1).Bootstrap(cs); err == nil {
		t.Fatal("a second Bootstrap succeeded")
	}
	commit(t, l, true, func(w *Write) { w.Append(2, []*pb.Entry{ent(1, 1, nil)}) })
	commit(t, l, true, func(w *Write) { w.SetHardState(3, hardState(1, 1, 0)) })
	for _, g := range []uint64{2, 3} {
		if err := l.mustGroup(g).Bootstrap(cs); err == nil || !strings.Contains(err.Error(), "already has state") {
			t.Fatalf("Bootstrap of group %d with state: %v", g, err)
		}
	}
	// A crash right after: the synced bootstrap survives.
	c := mustOpen(t, testOptions(fs.CrashClone(nil), 0))
	hs, gotCS, err := c.mustGroup(1).InitialState()
	if err != nil || hs != nil || !proto.Equal(gotCS, pb.EnsureConfState(proto.Clone(cs).(*pb.ConfState))) {
		t.Fatalf("bootstrapped group after a crash: %v, %v, %v", hs, gotCS, err)
	}
	if fi, _ := c.mustGroup(1).FirstIndex(); fi != 1 {
		t.Fatalf("FirstIndex %d", fi)
	}
	if li, _ := c.mustGroup(1).LastIndex(); li != 0 {
		t.Fatalf("LastIndex %d", li)
	}
	if _, err := c.mustGroup(1).Entries(1, 1, 100); err != raft.ErrUnavailable {
		t.Fatalf("Entries of an empty log: %v", err)
	}
	snap, err := c.mustGroup(1).Snapshot()
	if err != nil || !proto.Equal(snap.GetMetadata().GetConfState(), gotCS) || snap.GetMetadata().GetIndex() != 0 {
		t.Fatalf("Snapshot() = %v, %v", snap, err)
	}
	for _, g := range []uint64{1, 2, 3} {
		if err := c.mustGroup(g).Bootstrap(cs); err == nil {
			t.Fatalf("Bootstrap of group %d with state on disk succeeded", g)
		}
	}
	if ids, err := c.Groups(); err != nil || len(ids) != 3 {
		t.Fatalf("Groups() = %v, %v", ids, err)
	}
	c.Close()
	l.Close()
}

// TestCompactRefusals checks Compact's bounds and what it keeps.
func TestCompactRefusals(t *testing.T) {
	l := mustOpen(t, testOptions(vfs.NewMem(), 2))
	defer l.Close()
	g := l.mustGroup(1)
	if err := g.Compact(1); err == nil {
		t.Fatal("Compact(1) of an empty log succeeded")
	}
	commit(t, l, true, func(w *Write) {
		w.Append(1, []*pb.Entry{ent(1, 1, nil), ent(2, 1, nil), ent(3, 2, nil), ent(4, 2, nil)})
		w.SetHardState(1, hardState(2, 1, 4))
	})
	if err := g.Compact(5); err == nil || !strings.Contains(err.Error(), "beyond the last index 4") {
		t.Fatalf("Compact(5) past the last index: %v", err)
	}
	if err := g.Compact(3); err != nil {
		t.Fatal(err)
	}
	for _, i := range []uint64{0, 2, 3} {
		if err := g.Compact(i); err != raft.ErrCompacted {
			t.Fatalf("Compact(%d) after Compact(3): %v, want ErrCompacted", i, err)
		}
	}
	if tm, err := g.Term(3); tm != 2 || err != nil {
		t.Fatalf("Term(3) of the compaction point = %d, %v", tm, err)
	}
	if _, err := g.Term(2); err != raft.ErrCompacted {
		t.Fatalf("Term(2) below it: %v", err)
	}
	if _, err := g.Entries(3, 5, 100); err != raft.ErrCompacted {
		t.Fatalf("Entries(3, 5): %v", err)
	}
	if _, err := g.Snapshot(); err != raft.ErrSnapshotTemporarilyUnavailable {
		t.Fatalf("Snapshot() of a compacted log: %v", err)
	}
	// Compacting everything leaves an empty log that goes on at 5.
	if err := g.Compact(4); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Entries(5, 5, 100); err != raft.ErrUnavailable {
		t.Fatalf("Entries of an emptied log: %v", err)
	}
	commit(t, l, false, func(w *Write) { w.Append(1, []*pb.Entry{ent(5, 3, []byte("x"))}) })
	if ents, err := g.Entries(5, 6, 0); err != nil || len(ents) != 1 || string(ents[0].GetData()) != "x" {
		t.Fatalf("Entries(5, 6) = %v, %v", ents, err)
	}
}

// TestWriteRefusals checks that a malformed Write is refused whole, that
// the refusal is sticky, and so is a failed fsync.
func TestWriteRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		fill func(w *Write)
		msg  string
	}{
		{"gap", func(w *Write) { w.Append(1, []*pb.Entry{ent(5, 1, nil)}) }, "missing log entries"},
		{"not consecutive", func(w *Write) { w.Append(1, []*pb.Entry{ent(4, 1, nil), ent(6, 1, nil)}) }, "not consecutive"},
		{"index 0", func(w *Write) { w.Append(1, []*pb.Entry{ent(0, 1, nil)}) }, "index 0"},
		{"commit past the log", func(w *Write) { w.SetHardState(1, hardState(1, 0, 4)) }, "beyond the last index 3"},
		{"overwrite committed", func(w *Write) { w.Append(1, []*pb.Entry{ent(2, 2, nil)}) }, "overwrite committed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustOpen(t, testOptions(vfs.NewMem(), 0))
			defer l.Close()
			commit(t, l, true, func(w *Write) {
				w.Append(1, []*pb.Entry{ent(1, 1, nil), ent(2, 1, nil), ent(3, 1, nil)})
				w.SetHardState(1, hardState(1, 1, 2))
			})
			before := dumpAll(t, l, []uint64{1, 2})
			w := l.NewWrite()
			w.Append(2, []*pb.Entry{ent(1, 1, nil)}) // a valid part in the same Write
			tc.fill(w)
			if err := w.Commit(true); err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Commit: %v, want an error containing %q", err, tc.msg)
			}
			if after := dumpAll(t, l, []uint64{1, 2}); after != before {
				t.Fatalf("a refused Write changed the state:\n%s\nwas\n%s", after, before)
			}
			if err := l.mustGroup(3).Bootstrap(&pb.ConfState{Voters: []uint64{1}}); err == nil {
				t.Fatal("a write after a failed Commit succeeded")
			}
		})
	}

	// A failed fsync: nothing of the Write is visible, and nothing more is
	// written even once the disk is healthy again.
	efs := vfs.NewErrorFS(vfs.NewMem(), 1)
	l := mustOpen(t, testOptions(efs, 0))
	defer l.Close()
	commit(t, l, true, func(w *Write) { w.Append(1, []*pb.Entry{ent(1, 1, nil)}) })
	before := dumpAll(t, l, []uint64{1, 2})
	efs.Inject(vfs.Fault{Op: vfs.OpSync, Match: ".log"})
	w := l.NewWrite()
	w.Append(1, []*pb.Entry{ent(2, 1, nil)})
	w.Append(2, []*pb.Entry{ent(1, 1, nil)})
	w.SetHardState(2, hardState(1, 1, 1))
	if err := w.Commit(true); err == nil {
		t.Fatal("Commit on a failing fsync succeeded")
	}
	if n, _ := efs.Injected(); n != 1 {
		t.Fatalf("%d faults fired", n)
	}
	if after := dumpAll(t, l, []uint64{1, 2}); after != before {
		t.Fatalf("a failed Write is visible:\n%s\nwas\n%s", after, before)
	}
	efs.Disarm()
	w.Append(2, []*pb.Entry{ent(1, 1, nil)})
	if err := w.Commit(true); err == nil || !strings.Contains(err.Error(), "earlier failure") {
		t.Fatalf("Commit after a failed fsync: %v", err)
	}
	if err := l.mustGroup(1).Compact(1); err == nil {
		t.Fatal("Compact after a failed fsync succeeded")
	}
}

// corruptLog writes a log with two groups, then lets damage change its
// engine directly, and opens it.
func corruptLog(t *testing.T, damage func(db *lsm.DB)) (*Log, error) {
	t.Helper()
	fs := vfs.NewMem()
	l := mustOpen(t, testOptions(fs, 0))
	commit(t, l, true, func(w *Write) {
		for _, g := range []uint64{1, 2} {
			w.Append(g, []*pb.Entry{ent(1, 1, []byte("a")), ent(2, 1, []byte("b")), ent(3, 1, []byte("c"))})
			w.SetHardState(g, hardState(1, 1, 2))
			w.SetConfState(g, 0, &pb.ConfState{Voters: []uint64{1}})
		}
	})
	if err := l.mustGroup(2).Compact(1); err != nil {
		t.Fatal(err)
	}
	l.Close()
	db, err := lsm.Open(testDir, &lsm.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	damage(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return Open(testDir, testOptions(fs, 0))
}

var garbage = []byte{0xff, 0xff, 0xff}

// TestCorruption checks that damaged keys and values give errors that
// say what is wrong and wrap lsm.ErrCorruption, never a panic, and that a
// newer format version is refused.
func TestCorruption(t *testing.T) {
	set := func(key, value []byte) func(db *lsm.DB) {
		return func(db *lsm.DB) {
			if err := db.Set(key, value, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	del := func(key []byte) func(db *lsm.DB) {
		return func(db *lsm.DB) {
			if err := db.Delete(key, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	reindexed, _ := proto.Marshal(ent(7, 1, nil))
	// Refused at Open.
	for _, tc := range []struct {
		name   string
		damage func(db *lsm.DB)
		msg    string
	}{
		{"hard state", set(stateKey(1, kindHardState), garbage), "hard state"},
		{"conf state", set(stateKey(1, kindConfState), garbage), "conf state"},
		{"truncated state", set(stateKey(2, kindTruncated), garbage), "truncated state"},
		{"first entry after the truncation", del(entryKey(2, 2)), "first entry 3"},
		{"unknown kind", set(stateKey(1, 9), nil), "unknown key"},
		{"short key", set([]byte{nsGroup, 1}, nil), "malformed key"},
		{"long entry key", set(append(entryKey(1, 3), 0), nil), "malformed entry key"},
		{"commit past the log", set(stateKey(1, kindHardState), mustMarshal(t, hardState(1, 1, 9))), "beyond the last index 3"},
		{"version", set(formatVersionKey, garbage), "format version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := corruptLog(t, tc.damage)
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, lsm.ErrCorruption) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Open: %v; want a corruption error containing %q", err, tc.msg)
			}
		})
	}
	// Found by the reads that meet them.
	for _, tc := range []struct {
		name   string
		damage func(db *lsm.DB)
		index  uint64
		msg    string
	}{
		{"entry", set(entryKey(1, 2), garbage), 2, "entry 2"},
		{"entry index", set(entryKey(1, 2), reindexed), 2, "entry 2 holds index 7"},
		{"missing entry", del(entryKey(1, 2)), 2, "entry 2 missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := corruptLog(t, tc.damage)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			g := l.mustGroup(1)
			if _, err := g.Term(tc.index); !errors.Is(err, lsm.ErrCorruption) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Term(%d): %v; want a corruption error containing %q", tc.index, err, tc.msg)
			}
			if _, err := g.Entries(1, 4, 1<<20); !errors.Is(err, lsm.ErrCorruption) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Entries(1, 4): %v; want a corruption error containing %q", err, tc.msg)
			}
			// The entries before it read.
			if ents, err := g.Entries(1, tc.index, 1<<20); err != nil || len(ents) != int(tc.index-1) {
				t.Fatalf("Entries(1, %d) = %v, %v", tc.index, ents, err)
			}
		})
	}

	// An entry far beyond the others: a gap that only reads find, and that
	// writes get past in time proportional to the keys there are.
	far := uint64(1) << 62
	l, err := corruptLog(t, set(entryKey(1, far), mustMarshal(t, ent(far, 1, nil))))
	if err != nil {
		t.Fatal(err)
	}
	g := l.mustGroup(1)
	if li, _ := g.LastIndex(); li != far {
		t.Fatalf("LastIndex() = %d", li)
	}
	if _, err := g.Entries(1, far+1, 1<<20); !errors.Is(err, lsm.ErrCorruption) {
		t.Fatalf("Entries over the gap: %v", err)
	}
	if err := g.Compact(far - 1); !errors.Is(err, lsm.ErrCorruption) {
		t.Fatalf("Compact into the gap: %v", err)
	}
	commit(t, l, true, func(w *Write) { w.Append(1, []*pb.Entry{ent(3, 2, nil)}) })
	if li, _ := g.LastIndex(); li != 3 {
		t.Fatalf("LastIndex() after an append at 3 = %d", li)
	}
	l.Close()

	// A newer format, and an engine that is not a raft log.
	l, err = corruptLog(t, set(formatVersionKey, binary.AppendUvarint(nil, FormatVersion+1)))
	if err == nil {
		l.Close()
		t.Fatal("Open of a newer format succeeded")
	}
	if !strings.Contains(err.Error(), "format version 3 is newer than this build's format version 2") {
		t.Fatalf("Open of a newer format: %v", err)
	}
	l, err = corruptLog(t, del(formatVersionKey))
	if err == nil || !errors.Is(err, lsm.ErrCorruption) || !strings.Contains(err.Error(), "no format version") {
		t.Fatalf("Open without a format version: %v", err)
	}
	if err == nil {
		l.Close()
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	v, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEntriesOwnership checks that the caller owns the slice Entries
// returns: appending to it or overwriting its elements changes nothing
// the Storage returns later, from the cache or from disk.
func TestEntriesOwnership(t *testing.T) {
	for _, cache := range []int{-1, 0} {
		l := mustOpen(t, testOptions(vfs.NewMem(), cache))
		g := l.mustGroup(1)
		commit(t, l, true, func(w *Write) {
			w.Append(1, []*pb.Entry{ent(1, 1, []byte("a")), ent(2, 1, []byte("b")), ent(3, 1, []byte("c"))})
		})
		ents, err := g.Entries(1, 3, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		_ = append(ents, ent(3, 9, []byte("appended")))
		ents[0] = ent(1, 9, []byte("overwritten"))
		again, err := g.Entries(1, 4, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range again {
			if e.GetTerm() != 1 || e.GetIndex() != uint64(i+1) {
				t.Fatalf("cache %d: entry %d is %v after the caller changed its slice", cache, i+1, e)
			}
		}
		l.Close()
	}
}

// TestEntriesArguments checks the refusals of Entries and Term outside the
// log, and maxSize: at least one entry, then no more than maxSize bytes.
func TestEntriesArguments(t *testing.T) {
	l := mustOpen(t, testOptions(vfs.NewMem(), 2))
	defer l.Close()
	g := l.mustGroup(1)
	commit(t, l, true, func(w *Write) {
		w.Append(1, []*pb.Entry{ent(1, 1, make([]byte, 10)), ent(2, 1, make([]byte, 10)), ent(3, 1, make([]byte, 10)), ent(4, 1, make([]byte, 10))})
	})
	if _, err := g.Entries(3, 2, 100); err == nil {
		t.Fatal("Entries(3, 2) succeeded")
	}
	if _, err := g.Entries(1, 6, 100); err != raft.ErrUnavailable {
		t.Fatalf("Entries(1, 6): %v", err)
	}
	if _, err := g.Term(5); err != raft.ErrUnavailable {
		t.Fatalf("Term(5): %v", err)
	}
	size := uint64(proto.Size(ent(1, 1, make([]byte, 10))))
	// Two from disk and two from the cache, cut at every size.
	for max, want := range map[uint64]int{0: 1, size: 1, 2*size - 1: 1, 2 * size: 2, 3 * size: 3, 4 * size: 4} {
		if ents, err := g.Entries(1, 5, max); err != nil || len(ents) != want {
			t.Fatalf("Entries(1, 5, %d) = %d entries, %v; want %d", max, len(ents), err, want)
		}
	}
}

// TestConcurrentReaders reads a group from other goroutines while Writes
// and Compacts run, as a status reader would: under -race, and checking
// that every answer is consistent.
func TestConcurrentReaders(t *testing.T) {
	l := mustOpen(t, testOptions(vfs.NewMem(), 8))
	defer l.Close()
	g := l.mustGroup(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				fi, _ := g.FirstIndex()
				li, _ := g.LastIndex()
				ents, err := g.Entries(fi, li+1, ^uint64(0))
				if err == raft.ErrCompacted || err == raft.ErrUnavailable {
					continue // the log moved between the calls
				}
				if err != nil {
					t.Error(err)
					return
				}
				for i, e := range ents {
					if e.GetIndex() != fi+uint64(i) {
						t.Errorf("entry %d at position %d from %d", e.GetIndex(), i, fi)
						return
					}
				}
				g.InitialState()
			}
		})
	}
	for i := uint64(1); i <= 300; i++ {
		commit(t, l, false, func(w *Write) {
			w.Append(1, []*pb.Entry{ent(i, 1, []byte("x"))})
			w.SetHardState(1, hardState(1, 1, i))
		})
		if i%20 == 0 {
			if err := g.Compact(i - 10); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
}
