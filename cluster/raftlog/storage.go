package raftlog

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/lsm"
)

// Storage is the state of one raft group in a Log. It implements
// raft.Storage. Its methods are safe for concurrent use: writes (a
// Write's Commit, Compact, Bootstrap) hold the group's lock across their
// engine write, so a reader sees a group's state before or after a write,
// never in between.
type Storage struct {
	log *Log
	id  uint64

	mu sync.RWMutex
	hs *pb.HardState // nil: none persisted
	cs *pb.ConfState // nil: none persisted
	// truncIndex and truncTerm identify the last compacted entry, the
	// dummy entry at FirstIndex-1 (0, 0 when nothing was compacted).
	truncIndex, truncTerm uint64
	// last is the index of the last entry (truncIndex when there is none).
	// The engine holds exactly the entries truncIndex+1..last.
	last uint64
	// cache holds the newest entries, contiguous and ending at last (or
	// is empty), within the Log's bounds; cacheBytes is their size as
	// cachedSize counts it.
	cache      []*pb.Entry
	cacheBytes int64
	// rec is the replica record (the zero Replica when none is stored).
	rec Replica
}

var _ raft.Storage = (*Storage)(nil)

// corrupt returns an error wrapping lsm.ErrCorruption about group s.
func (s *Storage) corrupt(format string, args ...any) error {
	return fmt.Errorf("raftlog: %s: group %d: %w: %s", s.log.dir, s.id, lsm.ErrCorruption, fmt.Sprintf(format, args...))
}

// decode unmarshals a stored value, reporting a failure as corruption.
func (s *Storage) decode(v []byte, m proto.Message, what string) error {
	if err := proto.Unmarshal(v, m); err != nil {
		return s.corrupt("%s: %v", what, err)
	}
	return nil
}

// load reads the group's state from the engine.
func (s *Storage) load() error {
	l := s.log
	// The keys before the entries are the three single values, and only
	// the replica record may follow the entries (from version 2).
	for _, r := range []struct {
		lo, hi []byte
		kinds  []byte
	}{
		{groupPrefix(s.id), stateKey(s.id, kindEntry), []byte{kindHardState, kindConfState, kindTruncated}},
		{stateKey(s.id, kindEntry+1), groupUpperBound(s.id), []byte{kindReplica}},
	} {
		it := l.db.NewIter(&lsm.IterOptions{LowerBound: r.lo, UpperBound: r.hi})
		for ok := it.First(); ok; ok = it.Next() {
			k := it.Key()
			if len(k) != stateKeyLen || !slices.Contains(r.kinds, k[groupPrefixLen]) {
				it.Close()
				return s.corrupt("unknown key %x", k)
			}
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("raftlog: %s: group %d: %w", l.dir, s.id, err)
		}
	}
	if v, ok, err := l.get(stateKey(s.id, kindReplica)); err != nil {
		return err
	} else if ok {
		if l.version < formatVersionRecord {
			return s.corrupt("a replica record in a log of format version %d", l.version)
		}
		if s.rec, err = decodeReplica(v); err != nil {
			return s.corrupt("%v", err)
		}
	}
	if v, ok, err := l.get(stateKey(s.id, kindHardState)); err != nil {
		return err
	} else if ok {
		s.hs = &pb.HardState{}
		if err := s.decode(v, s.hs, "hard state"); err != nil {
			return err
		}
	}
	if v, ok, err := l.get(stateKey(s.id, kindConfState)); err != nil {
		return err
	} else if ok {
		s.cs = &pb.ConfState{}
		if err := s.decode(v, s.cs, "conf state"); err != nil {
			return err
		}
	}
	if v, ok, err := l.get(stateKey(s.id, kindTruncated)); err != nil {
		return err
	} else if ok {
		var e pb.Entry
		if err := s.decode(v, &e, "truncated state"); err != nil {
			return err
		}
		if e.GetIndex() == 0 {
			return s.corrupt("truncated state at index 0")
		}
		s.truncIndex, s.truncTerm = e.GetIndex(), e.GetTerm()
	}
	s.last = s.truncIndex
	it := l.db.NewIter(&lsm.IterOptions{LowerBound: stateKey(s.id, kindEntry), UpperBound: stateKey(s.id, kindEntry+1)})
	err := s.loadLast(it)
	if cerr := it.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("raftlog: %s: group %d: %w", l.dir, s.id, cerr)
	}
	if err != nil {
		return err
	}
	if c := s.hs.GetCommit(); c > s.last {
		return s.corrupt("hard state commit %d beyond the last index %d", c, s.last)
	}
	if s.rec.Removed && (s.hs != nil || s.cs != nil || s.truncIndex > 0 || s.last > 0) {
		return s.corrupt("the replica was removed, but the group holds raft state")
	}
	return nil
}

// loadLast sets last from the entries it iterates over, checking that the
// first one follows the truncated state.
func (s *Storage) loadLast(it *lsm.Iterator) error {
	if !it.First() {
		return nil
	}
	first, err := entryIndex(s.id, it.Key())
	if err != nil {
		return err
	}
	if first != s.truncIndex+1 {
		return s.corrupt("first entry %d, but the log is truncated at %d", first, s.truncIndex)
	}
	if !it.Last() {
		return nil // the iterator's error
	}
	s.last, err = entryIndex(s.id, it.Key())
	return err
}

// hasState reports whether anything of the group was persisted.
func (s *Storage) hasState() bool {
	return s.hs != nil || s.cs != nil || s.truncIndex > 0 || s.last > 0 || s.rec != (Replica{})
}

// Bootstrap writes, for a new group, the initial ConfState (its voters)
// with an empty log, in one synced write. It refuses a group that has
// any state.
func (s *Storage) Bootstrap(cs *pb.ConfState) error { return s.BootstrapMember(cs, 0, 0, 0) }

// BootstrapMember is Bootstrap for a group in which the node's member has
// raft id id, which the replica record keeps (0: the caller's default,
// and no record), and whose log starts after a snapshot position (index,
// term) rather than empty: the entry at index is the last compacted and
// committed, and the configuration is as of it. A log that never holds
// entry index, however young, sends a member that has nothing a snapshot,
// which carries the configuration, rather than entries without it.
func (s *Storage) BootstrapMember(cs *pb.ConfState, id, index, term uint64) error {
	if cs == nil {
		return fmt.Errorf("raftlog: group %d: bootstrap with a nil ConfState", s.id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.log.writable(); err != nil {
		return err
	}
	if s.hasState() {
		return fmt.Errorf("raftlog: group %d: bootstrap refused: the group already has state (last index %d, first index %d)", s.id, s.last, s.truncIndex+1)
	}
	cs = proto.Clone(cs).(*pb.ConfState)
	v, err := proto.Marshal(cs)
	if err != nil {
		return fmt.Errorf("raftlog: group %d: %w", s.id, err)
	}
	var b lsm.Batch
	b.Set(stateKey(s.id, kindConfState), v)
	var hs *pb.HardState
	if index > 0 {
		hs = &pb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(0), Commit: proto.Uint64(index)}
		hv, err := proto.Marshal(hs)
		if err != nil {
			return fmt.Errorf("raftlog: group %d: %w", s.id, err)
		}
		tv, err := proto.Marshal(&pb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term)})
		if err != nil {
			return fmt.Errorf("raftlog: group %d: %w", s.id, err)
		}
		b.Set(stateKey(s.id, kindHardState), hv)
		b.Set(stateKey(s.id, kindTruncated), tv)
	}
	rec := Replica{ID: id, ConfIndex: index}
	if rec != (Replica{}) {
		b.Set(stateKey(s.id, kindReplica), rec.encode())
		s.log.upgradeForRecord(&b)
	}
	if err := s.log.apply(&b, true); err != nil {
		return err
	}
	if rec != (Replica{}) {
		s.log.recordWritten()
	}
	s.cs, s.rec, s.hs = cs, rec, hs
	s.truncIndex, s.truncTerm, s.last = index, term, index
	return nil
}

// InitialState implements raft.Storage: the hard state (nil when none was
// written) and the conf state (empty when none was written).
func (s *Storage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var hs *pb.HardState
	if s.hs != nil {
		hs = proto.Clone(s.hs).(*pb.HardState)
	}
	cs := &pb.ConfState{}
	if s.cs != nil {
		cs = proto.Clone(s.cs).(*pb.ConfState)
	}
	return hs, pb.EnsureConfState(cs), nil
}

// ConfState returns the group's conf state (empty when none was
// written) without copying it, for a reader that keeps it beside the
// raft state machine: it is shared, and must not be changed. The Storage
// never changes one in place either; a new conf state replaces it.
func (s *Storage) ConfState() *pb.ConfState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cs == nil {
		return &pb.ConfState{}
	}
	return s.cs
}

// FirstIndex implements raft.Storage.
func (s *Storage) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.truncIndex + 1, nil
}

// LastIndex implements raft.Storage.
func (s *Storage) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.last, nil
}

// Term implements raft.Storage: the term of entry i, for i in
// [FirstIndex()-1, LastIndex()]; raft.ErrCompacted below,
// raft.ErrUnavailable above.
func (s *Storage) Term(i uint64) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.term(i)
}

func (s *Storage) term(i uint64) (uint64, error) {
	switch {
	case i < s.truncIndex:
		return 0, raft.ErrCompacted
	case i == s.truncIndex:
		return s.truncTerm, nil
	case i > s.last:
		return 0, raft.ErrUnavailable
	}
	if e := s.cached(i); e != nil {
		return e.GetTerm(), nil
	}
	v, ok, err := s.log.get(entryKey(s.id, i))
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, s.corrupt("entry %d missing from the log %d..%d", i, s.truncIndex+1, s.last)
	}
	e, err := s.decodeEntry(i, v)
	if err != nil {
		return 0, err
	}
	return e.GetTerm(), nil
}

// decodeEntry decodes the stored entry i.
func (s *Storage) decodeEntry(i uint64, v []byte) (*pb.Entry, error) {
	e := &pb.Entry{}
	if err := s.decode(v, e, fmt.Sprintf("entry %d", i)); err != nil {
		return nil, err
	}
	if e.GetIndex() != i {
		return nil, s.corrupt("entry %d holds index %d", i, e.GetIndex())
	}
	return e, nil
}

// DropCache empties the group's entry cache: the group is idle, every
// follower has every entry, and an idle group's memory should not hold
// its last few thousand writes (a node may have thousands of groups).
// Entries are read from the engine again if ever needed.
func (s *Storage) DropCache() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropCached(len(s.cache))
	s.cache = nil
}

// CachedBytes returns the size of the group's entry cache, as counted
// against Options.CacheBytes.
func (s *Storage) CachedBytes() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cacheBytes
}

// cached returns entry i from the cache, or nil.
func (s *Storage) cached(i uint64) *pb.Entry {
	if len(s.cache) == 0 || i < s.cache[0].GetIndex() {
		return nil
	}
	return s.cache[i-s.cache[0].GetIndex()]
}

// cacheFirst is the index of the first cached entry, last+1 if none.
func (s *Storage) cacheFirst() uint64 {
	if len(s.cache) == 0 {
		return s.last + 1
	}
	return s.cache[0].GetIndex()
}

// Entries implements raft.Storage: the entries [lo, hi), cut at maxSize
// bytes (proto.Size of each entry, as raft counts) but at least one.
// raft.ErrCompacted if lo is at or below the last compacted entry;
// raft.ErrUnavailable if hi is past LastIndex()+1 or the log is empty.
// The slice is the caller's; the entries must not be mutated.
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case lo <= s.truncIndex:
		return nil, raft.ErrCompacted
	case lo > hi:
		return nil, fmt.Errorf("raftlog: group %d: Entries(%d, %d): lo above hi", s.id, lo, hi)
	case hi > s.last+1 || s.last == s.truncIndex:
		return nil, raft.ErrUnavailable
	}
	var ents []*pb.Entry
	var size uint64
	// add appends e unless it would take the size over maxSize.
	add := func(e *pb.Entry) bool {
		n := uint64(proto.Size(e))
		if len(ents) > 0 && size+n > maxSize {
			return false
		}
		size += n
		ents = append(ents, e)
		return true
	}
	i := lo
	if cf := s.cacheFirst(); i < cf {
		end := min(hi, cf)
		it := s.log.db.NewIter(&lsm.IterOptions{LowerBound: entryKey(s.id, lo), UpperBound: entryKey(s.id, end)})
		full := false
		for ok := it.First(); ok && !full; ok = it.Next() {
			idx, err := entryIndex(s.id, it.Key())
			if err == nil && idx != i {
				err = s.corrupt("entry %d missing from the log %d..%d", i, s.truncIndex+1, s.last)
			}
			var e *pb.Entry
			if err == nil {
				e, err = s.decodeEntry(i, it.Value())
			}
			if err != nil {
				it.Close()
				return nil, err
			}
			if full = !add(e); !full {
				i++
			}
		}
		if err := it.Close(); err != nil {
			return nil, fmt.Errorf("raftlog: %s: group %d: %w", s.log.dir, s.id, err)
		}
		if full {
			return ents, nil
		}
		if i < end {
			return nil, s.corrupt("entry %d missing from the log %d..%d", i, s.truncIndex+1, s.last)
		}
	}
	for ; i < hi; i++ {
		if !add(s.cached(i)) {
			break
		}
	}
	return ents, nil
}

// Snapshot implements raft.Storage. Snapshots are not implemented yet:
// while nothing was compacted it returns the empty snapshot (index 0,
// term 0, the current ConfState), as raft.MemoryStorage does; once the
// log was compacted, raft.ErrSnapshotTemporarilyUnavailable. Raft asks
// for a snapshot only to send it to a follower that needs entries below
// FirstIndex, and retries later on that error.
func (s *Storage) Snapshot() (*pb.Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.truncIndex > 0 {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	cs := &pb.ConfState{}
	if s.cs != nil {
		cs = proto.Clone(s.cs).(*pb.ConfState)
	}
	return pb.EnsureSnapshot(&pb.Snapshot{Metadata: &pb.SnapshotMetadata{ConfState: cs}}), nil
}

// Compact discards the entries up to and including index, keeping the
// term of index (Term(index) still answers; FirstIndex becomes index+1).
// index must be at most the applied index the caller has made durable.
// raft.ErrCompacted if index is already compacted; an error if it is
// beyond LastIndex. The deletions and the new truncated state are one
// unsynced batch: a crash may undo a compaction, but never half of one.
func (s *Storage) Compact(index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.log.writable(); err != nil {
		return err
	}
	switch {
	case index <= s.truncIndex:
		return raft.ErrCompacted
	case index > s.last:
		return fmt.Errorf("raftlog: group %d: compact %d beyond the last index %d", s.id, index, s.last)
	}
	term, err := s.term(index)
	if err != nil {
		return err
	}
	var b lsm.Batch
	if err := s.deleteStored(&b, s.truncIndex+1, index); err != nil {
		return err
	}
	v, err := proto.Marshal(&pb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term)})
	if err != nil {
		return fmt.Errorf("raftlog: group %d: %w", s.id, err)
	}
	b.Set(stateKey(s.id, kindTruncated), v)
	if err := s.log.apply(&b, false); err != nil {
		return err
	}
	s.truncIndex, s.truncTerm = index, term
	if cf := s.cacheFirst(); index >= cf {
		s.dropCached(int(min(index+1-cf, uint64(len(s.cache)))))
	}
	return nil
}

// deleteStored adds to b the deletion of every stored entry from..to. It
// iterates over the keys there are rather than counting indexes, so that a
// corrupt index far from the others costs nothing (the keys there are must
// be read, values included, which a compaction pays for its entries).
func (s *Storage) deleteStored(b *lsm.Batch, from, to uint64) error {
	upper := stateKey(s.id, kindEntry+1)
	if to < math.MaxUint64 {
		upper = entryKey(s.id, to+1)
	}
	it := s.log.db.NewIter(&lsm.IterOptions{LowerBound: entryKey(s.id, from), UpperBound: upper})
	for ok := it.First(); ok; ok = it.Next() {
		b.Delete(it.Key())
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("raftlog: %s: group %d: %w", s.log.dir, s.id, err)
	}
	return nil
}
