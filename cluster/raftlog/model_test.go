package raftlog

import (
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/vfs"
)

var modelSeeds = flag.Int("raftlog-model-seeds", 4, "workloads of TestModel")

// TestModel runs random sequences of Writes (appends that often overwrite
// a suffix, hard states, several groups per Write, synced or not) and
// Compacts against a raft.MemoryStorage per group, and after every step
// compares the answers of every raft.Storage method of the groups it
// touched, at every bound of the log and at random arguments; now and
// then it closes and reopens the Log, so the answers must also come from
// disk with a cold cache. Cache sizes vary: none, smaller than the log,
// the default.
func TestModel(t *testing.T) {
	for seed := range uint64(*modelSeeds) {
		cache := []int{-1, 3, 0, 0}[seed%4]
		rng := rand.New(rand.NewPCG(seed, 42))
		fs := vfs.NewMem()
		opts := testOptions(fs, cache)
		if seed%4 == 3 {
			opts.CacheBytes = 200 // two or three entries of the generator's
		}
		l := mustOpen(t, opts)
		groups := []uint64{1, 7, math.MaxUint64}
		models := map[uint64]*raft.MemoryStorage{}
		gens := map[uint64]*gen{}
		for _, g := range groups {
			models[g] = raft.NewMemoryStorage()
			gens[g] = &gen{rng: rng}
		}
		// Group 7 starts from a bootstrapped conf state.
		cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
		if err := l.mustGroup(7).Bootstrap(cs); err != nil {
			t.Fatal(err)
		}
		if err := models[7].ApplySnapshot(&pb.Snapshot{Metadata: &pb.SnapshotMetadata{ConfState: cs, Index: proto.Uint64(0), Term: proto.Uint64(0)}}); err != nil {
			t.Fatal(err)
		}
		for step := range 120 {
			touched := groups
			switch op := rng.IntN(20); {
			case op < 13: // a Write
				w := l.NewWrite()
				touched = nil
				for _, g := range groups {
					if rng.IntN(2) == 0 {
						continue
					}
					touched = append(touched, g)
					ms := models[g]
					for range 1 + rng.IntN(2) {
						fi, _ := ms.FirstIndex()
						li, _ := ms.LastIndex()
						hs, _, _ := ms.InitialState()
						ents := gens[g].entries(fi, li, hs.GetCommit())
						w.Append(g, ents)
						if err := ms.Append(ents); err != nil {
							t.Fatal(err)
						}
					}
					if rng.IntN(2) == 0 {
						li, _ := ms.LastIndex()
						hs := gens[g].hardState(li)
						w.SetHardState(g, hs)
						ms.SetHardState(hs)
					}
				}
				if err := w.Commit(rng.IntN(2) == 0); err != nil {
					t.Fatalf("seed %d step %d: Commit: %v", seed, step, err)
				}
			case op < 14: // the group goes idle
				g := groups[rng.IntN(len(groups))]
				touched = []uint64{g}
				l.mustGroup(g).DropCache()
			case op < 18: // Compact
				g := groups[rng.IntN(len(groups))]
				touched = []uint64{g}
				ms := models[g]
				fi, _ := ms.FirstIndex()
				li, _ := ms.LastIndex()
				i := fi - 1 + rng.Uint64N(li-fi+3)
				err := l.mustGroup(g).Compact(i)
				if i > li {
					if err == nil {
						t.Fatalf("seed %d step %d: Compact(%d) past the last index %d succeeded", seed, step, i, li)
					}
					break
				}
				if want := ms.Compact(i); err != want {
					t.Fatalf("seed %d step %d: Compact(%d) = %v, MemoryStorage: %v", seed, step, i, err, want)
				}
			default:
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l = mustOpen(t, opts)
			}
			for _, g := range touched {
				compareStorage(t, rng, l.mustGroup(g), models[g])
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		// Everything is on disk.
		l = mustOpen(t, opts)
		if ids, err := l.Groups(); err != nil || !slices.Equal(ids, groups) {
			t.Fatalf("Groups() = %v, %v; want %v", ids, err, groups)
		}
		for _, g := range groups {
			compareStorage(t, rng, l.mustGroup(g), models[g])
		}
		l.Close()
	}
}

// compareStorage compares the answers of every raft.Storage method of got
// and want.
func compareStorage(t *testing.T, rng *rand.Rand, got *Storage, want *raft.MemoryStorage) {
	t.Helper()
	fi, _ := want.FirstIndex()
	li, _ := want.LastIndex()
	if g, err := got.FirstIndex(); g != fi || err != nil {
		t.Fatalf("group %d: FirstIndex() = %d, %v; want %d", got.id, g, err, fi)
	}
	if g, err := got.LastIndex(); g != li || err != nil {
		t.Fatalf("group %d: LastIndex() = %d, %v; want %d", got.id, g, err, li)
	}
	checkCache(t, got)
	whs, wcs, _ := want.InitialState()
	ghs, gcs, err := got.InitialState()
	if err != nil || (whs == nil) != (ghs == nil) || !proto.Equal(whs, ghs) || !proto.Equal(wcs, gcs) {
		t.Fatalf("group %d: InitialState() = %v, %v, %v; want %v, %v", got.id, ghs, gcs, err, whs, wcs)
	}
	for i := fi - min(fi, 2); i <= li+2; i++ {
		if i > fi+2 && i+2 < li && rng.IntN(4) != 0 {
			continue // the middle of a long log: a sample
		}
		wt, werr := want.Term(i)
		gt, gerr := got.Term(i)
		if gt != wt || gerr != werr {
			t.Fatalf("group %d (log %d..%d): Term(%d) = %d, %v; want %d, %v", got.id, fi, li, i, gt, gerr, wt, werr)
		}
	}
	sizes := []uint64{0, 40 + rng.Uint64N(100), math.MaxUint64}
	// Every bound of the log and a few random starts.
	los := []uint64{fi - min(fi, 1), fi, min(fi+1, li+1), max(li, fi), li + 1}
	for range 4 {
		los = append(los, fi+rng.Uint64N(li+2-fi))
	}
	for _, lo := range los {
		his := []uint64{lo, min(lo+1, li+1), li + 1, lo + rng.Uint64N(li+2-lo)}
		for _, hi := range his {
			for _, max := range sizes {
				compareEntries(t, got, want, lo, hi, max)
			}
		}
	}
	// Entries past the end is refused, not a panic (MemoryStorage panics).
	if _, err := got.Entries(fi, li+2, math.MaxUint64); err != raft.ErrUnavailable {
		t.Fatalf("group %d: Entries(%d, %d) past the last index %d: %v, want ErrUnavailable", got.id, fi, li+2, li, err)
	}
	snap, err := got.Snapshot()
	if fi == 1 {
		wsnap, _ := want.Snapshot()
		if err != nil || !proto.Equal(snap, wsnap) {
			t.Fatalf("group %d: Snapshot() = %v, %v; want %v", got.id, snap, err, wsnap)
		}
	} else if !errors.Is(err, raft.ErrSnapshotTemporarilyUnavailable) {
		t.Fatalf("group %d: Snapshot() of a compacted log = %v, %v; want ErrSnapshotTemporarilyUnavailable", got.id, snap, err)
	}
}

func compareEntries(t *testing.T, got *Storage, want *raft.MemoryStorage, lo, hi, max uint64) {
	t.Helper()
	w, werr := want.Entries(lo, hi, max)
	g, gerr := got.Entries(lo, hi, max)
	if gerr != werr || len(g) != len(w) {
		t.Fatalf("group %d: Entries(%d, %d, %d) = %d entries, %v; want %d, %v", got.id, lo, hi, max, len(g), gerr, len(w), werr)
	}
	for i := range w {
		if !proto.Equal(g[i], w[i]) {
			t.Fatalf("group %d: Entries(%d, %d, %d)[%d] = %v; want %v", got.id, lo, hi, max, i, g[i], w[i])
		}
	}
}

// checkCache checks the invariants of a group's cache: at most
// cacheEntries entries, contiguous, ending at the last index, none of
// them compacted (a compacted entry must not stay in memory).
func checkCache(t *testing.T, s *Storage) {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := s.cache
	var size int64
	for _, e := range c {
		size += cachedSize(e)
	}
	if size != s.cacheBytes || size > s.log.cacheBytes {
		t.Fatalf("group %d: cached entries hold %d bytes, counted as %d, bound %d", s.id, size, s.cacheBytes, s.log.cacheBytes)
	}
	if len(c) == 0 {
		return
	}
	if len(c) > s.log.cacheEntries {
		t.Fatalf("group %d: %d entries cached, more than %d", s.id, len(c), s.log.cacheEntries)
	}
	if c[0].GetIndex() <= s.truncIndex || c[len(c)-1].GetIndex() != s.last {
		t.Fatalf("group %d: cache %d..%d, log %d..%d", s.id, c[0].GetIndex(), c[len(c)-1].GetIndex(), s.truncIndex+1, s.last)
	}
	for i, e := range c {
		if e.GetIndex() != c[0].GetIndex()+uint64(i) {
			t.Fatalf("group %d: cache not contiguous at %d", s.id, e.GetIndex())
		}
	}
}
