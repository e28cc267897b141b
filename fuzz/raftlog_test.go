package fuzz

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/cluster/raftlog"
	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// The fuzz input is a list of edits to the engine of a real raft log, as a
// damaged disk or a bug could leave it. Each edit is an op byte, then:
//
//	op&3 == 0: a raw key: length byte (mod 24), key bytes
//	op&3 == 1: a group's state key: group byte (mod 4), kind byte
//	op&3 == 2: an entry key: group byte (mod 4), index byte
//	op&3 == 3: the deletion of an entry key: group byte (mod 4), index byte
//
// and for the first three a value: with op&4 a raftpb.Entry of index and
// term bytes, with op&8 a raftpb.HardState of term, vote and commit bytes,
// else raw bytes; either way a length byte (mod 64) and bytes follow (the
// raw value, or the entry's data). Missing bytes read as zero.
const (
	rlRaw = iota
	rlState
	rlEntry
	rlDelete
	rlAsEntry     = 4
	rlAsHardState = 8
)

// The state keys (docs/raftlog.md), built here rather than imported so
// that the target checks the documented layout.
func rlGroupKey(group uint64, kind byte, index ...byte) []byte {
	k := []byte{0x02, 0, 0, 0, 0, 0, 0, 0, byte(group), kind}
	if len(index) > 0 {
		k = append(k, 0, 0, 0, 0, 0, 0, 0, index[0])
	}
	return k
}

type rlReader struct{ data []byte }

func (r *rlReader) byte() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *rlReader) bytes(n int) []byte {
	n = min(n, len(r.data))
	b := r.data[:n]
	r.data = r.data[n:]
	return b
}

// rlEdits applies the edits of data to db in one batch.
func rlEdits(db *lsm.DB, data []byte) error {
	r := &rlReader{data: data}
	var b lsm.Batch
	for len(r.data) > 0 {
		op := r.byte()
		var key []byte
		switch op & 3 {
		case rlRaw:
			key = append([]byte(nil), r.bytes(int(r.byte()%24))...)
		case rlState:
			g := uint64(r.byte() % 4)
			key = rlGroupKey(g, r.byte())
		case rlEntry, rlDelete:
			g := uint64(r.byte() % 4)
			key = rlGroupKey(g, 0x04, r.byte())
		}
		if op&3 == rlDelete {
			b.Delete(key)
			continue
		}
		var value []byte
		switch {
		case op&rlAsEntry != 0:
			e := &pb.Entry{Index: proto.Uint64(uint64(r.byte())), Term: proto.Uint64(uint64(r.byte()))}
			e.Data = r.bytes(int(r.byte() % 64))
			value, _ = proto.Marshal(e)
		case op&rlAsHardState != 0:
			hs := &pb.HardState{Term: proto.Uint64(uint64(r.byte())), Vote: proto.Uint64(uint64(r.byte())), Commit: proto.Uint64(uint64(r.byte()))}
			value, _ = proto.Marshal(hs)
		default:
			value = r.bytes(int(r.byte() % 64))
		}
		b.Set(key, value)
	}
	return db.Apply(&b, nil)
}

const rlDir = "raftlog"

func rlOptions(fs vfs.FS) *raftlog.Options {
	return &raftlog.Options{FS: fs, CacheEntries: 2, MemTableSize: 16 << 10}
}

func rlEnt(index, term uint64, data string) *pb.Entry {
	return &pb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term), Data: []byte(data)}
}

// rlBase is a healthy raft log, written once: group 1 with entries 1..5
// and a conf state, group 2 with entries 3..6 (compacted at 2).
var rlBase = sync.OnceValues(func() (*vfs.MemFS, error) {
	fs := vfs.NewMem()
	l, err := raftlog.Open(rlDir, rlOptions(fs))
	if err != nil {
		return nil, err
	}
	w := l.NewWrite()
	for _, g := range []uint64{1, 2} {
		var ents []*pb.Entry
		for i := uint64(1); i <= 4+g; i++ {
			ents = append(ents, rlEnt(i, 1+i/3, "command"))
		}
		w.Append(g, ents)
		w.SetHardState(g, &pb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(g), Commit: proto.Uint64(2 + g)})
	}
	w.SetConfState(1, 0, &pb.ConfState{Voters: []uint64{1, 2, 3}})
	if err := w.Commit(true); err != nil {
		return nil, err
	}
	g2, err := l.Group(2)
	if err != nil {
		return nil, err
	}
	if err := g2.Compact(2); err != nil {
		return nil, err
	}
	if err := l.Close(); err != nil {
		return nil, err
	}
	return fs, nil
})

// FuzzRaftLog damages the engine of a real raft log with arbitrary edits
// (keys and values, raw or of the right shape), then opens the Log and
// calls every Storage method and every write: there must be no panic and
// no hang; reads either answer consistently (entries consecutive from the
// index asked, never more than asked) or fail with raft.ErrCompacted,
// raft.ErrUnavailable or an error wrapping lsm.ErrCorruption.
func FuzzRaftLog(f *testing.F) {
	f.Add([]byte{}) // the corpus is testdata/fuzz/FuzzRaftLog, from rlSeeds
	f.Fuzz(func(t *testing.T, data []byte) {
		base, err := rlBase()
		if err != nil {
			t.Fatal(err)
		}
		fs := base.CrashClone(nil) // a copy
		db, err := lsm.Open(rlDir, &lsm.Options{FS: fs, MemTableSize: 16 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := rlEdits(db, data); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		l, err := raftlog.Open(rlDir, rlOptions(fs))
		if err != nil {
			return // refused, not a panic
		}
		ids, err := l.Groups()
		if err != nil {
			t.Fatalf("Groups after a successful Open: %v", err)
		}
		for _, id := range append(ids, 3) {
			if g := rlGroup(t, l, id); g != nil {
				rlExercise(t, g)
			}
			// Unloaded, a group is read from the damaged engine again.
			l.Unload(id)
			if g := rlGroup(t, l, id); g != nil {
				rlExercise(t, g)
			}
		}
		// Writes: they may be refused, and the Log then stops writing.
		for _, id := range append(ids, 3) {
			g := rlGroup(t, l, id)
			if g == nil {
				continue
			}
			li, _ := g.LastIndex()
			fi, _ := g.FirstIndex()
			hs, _, _ := g.InitialState()
			w := l.NewWrite()
			if li < math.MaxUint64 {
				w.Append(id, []*pb.Entry{rlEnt(li+1, hs.GetTerm()+1, "new")})
			}
			w.SetHardState(id, &pb.HardState{Term: proto.Uint64(hs.GetTerm() + 1), Commit: proto.Uint64(hs.GetCommit())})
			w.Commit(true)
			g.Compact(fi)
			if li > fi+1 && hs.GetCommit() < li-1 {
				// Overwrite the last two entries.
				w.Append(id, []*pb.Entry{rlEnt(li-1, hs.GetTerm()+2, "overwrite")})
				w.Commit(false)
			}
			g.Bootstrap(&pb.ConfState{Voters: []uint64{1}})
			rlExercise(t, g)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		// Whatever was written reopens or is refused.
		if l, err := raftlog.Open(rlDir, rlOptions(fs)); err == nil {
			for _, id := range append(ids, 3) {
				if g := rlGroup(t, l, id); g != nil {
					rlExercise(t, g)
				}
			}
			l.Close()
		}
	})
}

// rlGroup returns group id's Storage, or nil if loading it failed as
// documented (rlReadErr).
func rlGroup(t *testing.T, l *raftlog.Log, id uint64) *raftlog.Storage {
	g, err := l.Group(id)
	if err != nil {
		rlReadErr(t, fmt.Sprintf("Group(%d)", id), err)
		return nil
	}
	return g
}

// rlReadErr checks that a read failed as documented.
func rlReadErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && err != raft.ErrCompacted && err != raft.ErrUnavailable && !errors.Is(err, lsm.ErrCorruption) {
		t.Fatalf("%s: %v: neither a raft sentinel nor corruption", what, err)
	}
}

// rlExercise calls every raft.Storage method of g around the bounds of
// its log.
func rlExercise(t *testing.T, g *raftlog.Storage) {
	t.Helper()
	fi, err := g.FirstIndex()
	rlReadErr(t, "FirstIndex", err)
	li, err := g.LastIndex()
	rlReadErr(t, "LastIndex", err)
	if _, cs, err := g.InitialState(); err != nil || cs == nil {
		t.Fatalf("InitialState: conf state %v, %v", cs, err)
	}
	if _, err := g.Snapshot(); err != nil && err != raft.ErrSnapshotTemporarilyUnavailable {
		t.Fatalf("Snapshot: %v", err)
	}
	// Indexes around both ends of the log, without overflowing.
	var idx []uint64
	for d := range uint64(4) {
		if fi >= d {
			idx = append(idx, fi-d)
		}
		idx = append(idx, fi+d, li+d)
		if li >= d {
			idx = append(idx, li-d)
		}
	}
	for _, i := range idx {
		_, err := g.Term(i)
		rlReadErr(t, "Term", err)
	}
	for _, lo := range idx {
		for _, hi := range idx {
			if lo > hi || hi-lo > 300 {
				continue
			}
			for _, max := range []uint64{0, 30, math.MaxUint64} {
				ents, err := g.Entries(lo, hi, max)
				rlReadErr(t, "Entries", err)
				if err != nil {
					continue
				}
				if uint64(len(ents)) > hi-lo || (hi > lo && len(ents) == 0) {
					t.Fatalf("Entries(%d, %d, %d): %d entries", lo, hi, max, len(ents))
				}
				for k, e := range ents {
					if e.GetIndex() != lo+uint64(k) {
						t.Fatalf("Entries(%d, %d, %d)[%d] has index %d", lo, hi, max, k, e.GetIndex())
					}
				}
			}
		}
	}
}

// rlSeeds are edits that reach each check of Open and of the reads.
func rlSeeds() map[string][]byte {
	return map[string][]byte{
		"none":               {},
		"garbage-hard-state": {rlState, 1, 0x01, 3, 0xff, 0xff, 0xff},
		"commit-past-log":    {rlState | rlAsHardState, 1, 0x01, 2, 1, 9, 0},
		"garbage-conf-state": {rlState, 2, 0x02, 2, 0x0a, 0x05},
		"truncated-at-0":     {rlState | rlAsEntry, 3, 0x03, 0, 1, 0},
		"entry-garbage":      {rlEntry, 1, 3, 2, 0xff, 0x01},
		"entry-reindexed":    {rlEntry | rlAsEntry, 1, 3, 7, 1, 1, 'x'},
		"entry-missing":      {rlDelete, 1, 3},
		"first-not-after":    {rlDelete, 2, 3},
		"far-entry":          {rlEntry | rlAsEntry, 1, 200, 200, 1, 0},
		"new-group":          {rlEntry | rlAsEntry, 3, 1, 1, 1, 0, rlState | rlAsHardState, 3, 0x01, 1, 1, 1},
		"unknown-kind":       {rlState, 1, 0x09, 0},
		"short-key":          {rlRaw, 3, 0x02, 0, 1, 0},
		"newer-version":      {rlRaw, 2, 0x01, 0x01, 1, 3},
		"replica-record":     {rlState, 1, 0x05, 5, 0x85, 0x80, 0x04, 0, 0},
		"removed-with-log":   {rlState, 1, 0x05, 3, 1, 0, 1},
		"bad-record":         {rlState, 2, 0x05, 2, 9, 0},
	}
}

// TestRaftLogSeeds checks that the seeds reach what their names say: the
// ones Open must refuse, it refuses.
func TestRaftLogSeeds(t *testing.T) {
	base, err := rlBase()
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]bool{"garbage-hard-state": true, "commit-past-log": true, "garbage-conf-state": true,
		"truncated-at-0": true, "first-not-after": true, "unknown-kind": true, "short-key": true, "newer-version": true,
		"removed-with-log": true, "bad-record": true}
	for name, data := range rlSeeds() {
		fs := base.CrashClone(nil)
		db, err := lsm.Open(rlDir, &lsm.Options{FS: fs, MemTableSize: 16 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := rlEdits(db, data); err != nil {
			t.Fatal(err)
		}
		db.Close()
		l, err := raftlog.Open(rlDir, rlOptions(fs))
		if (err != nil) != refused[name] {
			t.Errorf("%s: Open: %v; refusal expected: %v", name, err, refused[name])
		}
		if err == nil {
			l.Close()
		}
	}
}

// TestRaftLogSeedFiles checks the committed corpus of FuzzRaftLog.
func TestRaftLogSeedFiles(t *testing.T) {
	checkSeedFiles(t, "FuzzRaftLog", rlSeeds())
}
