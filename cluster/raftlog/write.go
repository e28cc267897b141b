package raftlog

import (
	"fmt"
	"math"
	"slices"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/lsm"
)

// A Write gathers the persistence work of one turn of the node loop,
// across groups, and commits it as one lsm batch: one fsync when synced,
// whatever the number of groups. It is not safe for concurrent use. After
// Commit it is empty and may be reused.
type Write struct {
	log    *Log
	groups map[uint64]*groupWrite
}

// groupWrite is what a Write holds for one group.
type groupWrite struct {
	snap    *pb.SnapshotMetadata // applied before the appends
	appends [][]*pb.Entry        // in call order
	hs      *pb.HardState
	cs      *pb.ConfState
	// confIndex is the log position cs is as of; replicaID, when not 0,
	// the node's member's raft id to record.
	confIndex uint64
	replicaID uint64
}

// NewWrite returns an empty Write.
func (l *Log) NewWrite() *Write {
	return &Write{log: l, groups: map[uint64]*groupWrite{}}
}

func (w *Write) group(id uint64) *groupWrite {
	g := w.groups[id]
	if g == nil {
		g = &groupWrite{}
		w.groups[id] = g
	}
	return g
}

// Append adds entries, which must have consecutive indexes, to a group's
// log. The entries at and after the first one's index replace the log's
// suffix from there (raft's truncation of a conflicting tail): the later
// entries on disk are deleted in the same batch. Entries at or below the
// last compacted index are ignored, as raft.MemoryStorage does. Append
// keeps the entries (not the slice): they must not be mutated afterwards,
// as raft requires of the entries of a Ready anyway. Errors (a gap after
// the last index, indexes that are not consecutive, an append at or below
// the commit index of the stored hard state, which raft never does) are
// reported by Commit.
func (w *Write) Append(group uint64, entries []*pb.Entry) {
	if len(entries) == 0 {
		return
	}
	g := w.group(group)
	g.appends = append(g.appends, slices.Clone(entries))
}

// ApplySnapshot moves a group's log to a snapshot's position, as raft asks
// when a follower installs a snapshot: every entry goes, the snapshot's
// index and term become the last compacted entry (FirstIndex is index+1),
// and its conf state the group's. Entries appended in the same Write must
// follow the snapshot's index.
func (w *Write) ApplySnapshot(group uint64, meta *pb.SnapshotMetadata) {
	if meta != nil {
		w.group(group).snap = proto.Clone(meta).(*pb.SnapshotMetadata)
	}
}

// SetHardState sets a group's hard state. A nil hs is ignored.
func (w *Write) SetHardState(group uint64, hs *pb.HardState) {
	if hs != nil {
		w.group(group).hs = proto.Clone(hs).(*pb.HardState)
	}
}

// SetConfState sets a group's conf state, as of the entry at index (its
// configuration change), which the replica record keeps. A nil cs is
// ignored.
func (w *Write) SetConfState(group, index uint64, cs *pb.ConfState) {
	if cs != nil {
		g := w.group(group)
		g.cs, g.confIndex = proto.Clone(cs).(*pb.ConfState), index
	}
}

// Commit writes everything the Write gathered as one batch, synced when
// sync is true, and on success updates each group's state in memory
// (last index, cache, hard and conf state), so raft sees it. On error
// nothing of the Write is visible, and the error is sticky: every later
// write of the Log fails (the node must stop: an fsync failure cannot be
// retried safely). That includes the refusals of a malformed Write (a
// gap in a group's log, a hard state committing past the last index).
//
// A Write with nothing in it commits nothing and does no I/O, even with
// sync: it does not make earlier unsynced writes durable.
//
// The groups are locked, in id order, for the duration of the write.
func (w *Write) Commit(sync bool) error {
	defer clear(w.groups)
	if err := w.log.writable(); err != nil {
		return err
	}
	if len(w.groups) == 0 {
		return nil
	}
	ids := sortedIDs(w.groups)
	stores := make([]*Storage, len(ids))
	for i, id := range ids {
		s, err := w.log.Group(id)
		if err != nil {
			return err // nothing written
		}
		stores[i] = s
		s.mu.Lock()
		defer stores[i].mu.Unlock()
	}
	wb := w.log.getBuffers()
	defer w.log.putBuffers(wb)
	b := &wb.batch
	plans := make([]groupPlan, len(ids))
	records := false
	for i, s := range stores {
		p, err := s.plan(wb, w.groups[ids[i]])
		if err != nil {
			return w.log.fail(err)
		}
		plans[i] = p
		records = records || p.rec != nil
	}
	if records {
		w.log.upgradeForRecord(b)
	}
	if err := w.log.apply(b, sync); err != nil {
		return err
	}
	if records {
		w.log.recordWritten()
	}
	for i, s := range stores {
		s.install(w.groups[ids[i]], plans[i])
	}
	return nil
}

// groupPlan is the outcome of a group's part of a Write.
type groupPlan struct {
	last    uint64
	appends [][]*pb.Entry // with the compacted entries cut off
	// snapshot: the new last compacted entry, once b is written.
	snap                  bool
	truncIndex, truncTerm uint64
	// rec is the new replica record, when the write changes it.
	rec *Replica
}

// plan adds a group's part of a Write to wb's batch, against the group's
// current state, and returns what to install once the batch is written.
func (s *Storage) plan(wb *writeBuffers, g *groupWrite) (groupPlan, error) {
	b := &wb.batch
	p := groupPlan{last: s.last}
	if s.rec.Removed {
		return p, fmt.Errorf("raftlog: group %d: a write to a group whose replica (%d) was removed", s.id, s.rec.ID)
	}
	truncIndex := s.truncIndex
	if g.snap != nil {
		idx := g.snap.GetIndex()
		if idx <= s.truncIndex {
			return p, fmt.Errorf("raftlog: group %d: snapshot at %d, not past the compacted %d", s.id, idx, s.truncIndex)
		}
		if err := s.deleteStored(b, s.truncIndex+1, math.MaxUint64); err != nil {
			return p, err
		}
		v, err := proto.Marshal(&pb.Entry{Index: proto.Uint64(idx), Term: proto.Uint64(g.snap.GetTerm())})
		if err != nil {
			return p, fmt.Errorf("raftlog: group %d: %w", s.id, err)
		}
		b.Set(stateKey(s.id, kindTruncated), v)
		if g.cs == nil {
			g.cs, g.confIndex = proto.Clone(g.snap.GetConfState()).(*pb.ConfState), idx
		}
		p.snap, p.truncIndex, p.truncTerm = true, idx, g.snap.GetTerm()
		p.last, truncIndex = idx, idx
	}
	// The keys this Write sets are setLo..p.last (each append starts at
	// most at the previous one's end + 1).
	setLo := uint64(math.MaxUint64)
	for _, ents := range g.appends {
		first := ents[0].GetIndex()
		for k, e := range ents {
			if e.GetIndex() != first+uint64(k) {
				return p, fmt.Errorf("raftlog: group %d: appended entries are not consecutive: index %d after %d", s.id, e.GetIndex(), first+uint64(k)-1)
			}
		}
		if first == 0 {
			return p, fmt.Errorf("raftlog: group %d: appended entry at index 0", s.id)
		}
		if c := s.hs.GetCommit(); first <= c && g.snap == nil {
			return p, fmt.Errorf("raftlog: group %d: append at %d would overwrite committed entries (commit %d)", s.id, first, c)
		}
		if first > p.last+1 {
			return p, fmt.Errorf("raftlog: group %d: missing log entries: append at %d after the last index %d", s.id, first, p.last)
		}
		if first <= truncIndex {
			skip := truncIndex + 1 - first
			if skip >= uint64(len(ents)) {
				continue
			}
			ents, first = ents[skip:], truncIndex+1
		}
		for _, e := range ents {
			if err := wb.setEntry(s.id, e); err != nil {
				return p, fmt.Errorf("raftlog: group %d: entry %d: %w", s.id, e.GetIndex(), err)
			}
		}
		newLast := first + uint64(len(ents)) - 1
		if newLast < p.last {
			// Delete the tail after the new entries: the keys this
			// Write set by counting, the stored ones by finding them,
			// so that a corrupt last index far beyond the stored keys
			// costs no more than the keys there are.
			for i := max(newLast+1, setLo); i <= p.last; i++ {
				b.Delete(entryKey(s.id, i))
			}
			if newLast < s.last && newLast+1 < setLo && !p.snap {
				if err := s.deleteStored(b, newLast+1, min(s.last, setLo-1)); err != nil {
					return p, err
				}
			}
		}
		setLo = min(setLo, first)
		p.last = newLast
		p.appends = append(p.appends, ents)
	}
	if g.cs != nil {
		v, err := proto.Marshal(g.cs)
		if err != nil {
			return p, fmt.Errorf("raftlog: group %d: conf state: %w", s.id, err)
		}
		b.Set(stateKey(s.id, kindConfState), v)
	}
	if rec := s.rec; g.cs != nil || g.replicaID != 0 {
		if g.cs != nil {
			rec.ConfIndex = g.confIndex
		}
		if g.replicaID != 0 {
			rec.ID = g.replicaID
		}
		if rec != s.rec {
			p.rec = &rec
			b.Set(stateKey(s.id, kindReplica), rec.encode())
		}
	}
	if g.hs != nil {
		if c := g.hs.GetCommit(); c > p.last {
			return p, fmt.Errorf("raftlog: group %d: hard state commits %d, beyond the last index %d", s.id, c, p.last)
		}
		v, err := proto.Marshal(g.hs)
		if err != nil {
			return p, fmt.Errorf("raftlog: group %d: hard state: %w", s.id, err)
		}
		b.Set(stateKey(s.id, kindHardState), v)
	}
	return p, nil
}

// install makes a written plan the group's state.
func (s *Storage) install(g *groupWrite, p groupPlan) {
	if p.snap {
		s.truncIndex, s.truncTerm = p.truncIndex, p.truncTerm
		s.cache, s.cacheBytes = nil, 0
	}
	for _, ents := range p.appends {
		s.cacheAppend(ents)
	}
	s.last = p.last
	if g.hs != nil {
		s.hs = g.hs
	}
	if g.cs != nil {
		s.cs = g.cs
	}
	if p.rec != nil {
		s.rec = *p.rec
	}
}

// cacheAppend adds appended entries to the cache, replacing the cached
// suffix they overwrite, and drops the oldest beyond the cache's bounds.
func (s *Storage) cacheAppend(ents []*pb.Entry) {
	if s.log.cacheEntries == 0 {
		return
	}
	first := ents[0].GetIndex()
	if cf := s.cacheFirst(); len(s.cache) > 0 && first >= cf {
		// first <= last+1: the entries continue or overwrite the cache.
		for _, e := range s.cache[first-cf:] {
			s.cacheBytes -= cachedSize(e)
		}
		s.cache = append(s.cache[:first-cf], ents...)
	} else {
		// The cache is empty or the entries replace all of it.
		s.cache, s.cacheBytes = append(s.cache[:0:0], ents...), 0
	}
	for _, e := range ents {
		s.cacheBytes += cachedSize(e)
	}
	drop := 0
	for over := s.cacheBytes - s.log.cacheBytes; drop < len(s.cache) && (len(s.cache)-drop > s.log.cacheEntries || over > 0); drop++ {
		over -= cachedSize(s.cache[drop])
	}
	s.dropCached(drop)
}

// cachedSize is what a cached entry is counted as: its data, and about
// what the decoded entry costs beside it.
func cachedSize(e *pb.Entry) int64 { return int64(len(e.GetData())) + 64 }

// dropCached drops the k oldest cached entries.
func (s *Storage) dropCached(k int) {
	for _, e := range s.cache[:k] {
		s.cacheBytes -= cachedSize(e)
	}
	clear(s.cache[:k]) // let the dropped entries be collected
	s.cache = s.cache[k:]
}

// writeBuffers are a Commit's batch and its scratch space for encoding
// entries, kept between Commits (Log.getBuffers): the node loop commits
// a Write every turn, and growing these from nothing each time was most
// of what a follower allocated.
type writeBuffers struct {
	batch lsm.Batch
	key   []byte
	value []byte
}

// maxKeptBatch bounds the batch a Log keeps for reuse: one that grew
// larger (a snapshot's deletions, a long catch-up) is left to the GC.
const maxKeptBatch = 1 << 20

func (l *Log) getBuffers() *writeBuffers {
	if wb, ok := l.buffers.Get().(*writeBuffers); ok {
		return wb
	}
	return &writeBuffers{}
}

func (l *Log) putBuffers(wb *writeBuffers) {
	if wb.batch.Size() > maxKeptBatch || cap(wb.value) > maxKeptBatch {
		return
	}
	wb.batch.Reset()
	l.buffers.Put(wb)
}

// setEntry adds entry e of group to the batch. The batch copies key and
// value, so both are encoded into the scratch buffers.
func (wb *writeBuffers) setEntry(group uint64, e *pb.Entry) error {
	var err error
	if wb.value, err = (proto.MarshalOptions{}).MarshalAppend(wb.value[:0], e); err != nil {
		return err
	}
	wb.key = appendEntryKey(wb.key[:0], group, e.GetIndex())
	wb.batch.Set(wb.key, wb.value)
	return nil
}
