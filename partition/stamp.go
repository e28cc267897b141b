package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

// Stamp places a write in a replicated log (package cluster): the store
// applies the write as the command at Index of raft group Group's log. Its
// commit timestamps are Timestamp, Timestamp+1, ... (one per entity
// written), chosen by the command's proposer rather than by this store's
// clock, so every replica stamps the same write alike. A proposer stamps
// above everything it has seen applied, but one that restarted, or whose
// clock fell behind another's, may not have seen the newest timestamp of
// an entity: the store then commits at one past the entity's newest
// instead, which every replica, holding the same data, computes alike.
// Index is recorded as the group's applied index with the write's data in
// one engine batch, and the batch is not synced: the log holds the write
// durably, and a replica restarted after a crash replays it from
// AppliedIndex(Group) on. Each group has its own applied index, so the
// groups of one store apply their logs independently.
type Stamp struct {
	Group     uint64
	Index     uint64
	Timestamp odata.DateTime // 0 for writes without timestamps: tables, ACLs, service properties
}

type stampKey struct{}

// WithStamp returns a context under which the store's writes apply as
// the stamped command. The context must not be cancelled while the write
// runs: a replica applies every command of the log, whatever its client
// does.
func WithStamp(ctx context.Context, st Stamp) context.Context {
	return context.WithValue(ctx, stampKey{}, st)
}

func stampOf(ctx context.Context) (Stamp, bool) {
	st, ok := ctx.Value(stampKey{}).(Stamp)
	return st, ok
}

// unsyncedWO is the write options of stamped writes.
var unsyncedWO = &lsm.WriteOptions{Sync: false}

// writeOptions returns how a write under ctx is committed: synced, or,
// stamped, unsynced and recording its log index in b.
func (s *Store) writeOptions(ctx context.Context, b *lsm.Batch) *lsm.WriteOptions {
	if !recordStamp(ctx, b) {
		return s.syncWO
	}
	return unsyncedWO
}

// recordStamp adds to b the applied index of ctx's Stamp, if it has one,
// and reports whether it did.
func recordStamp(ctx context.Context, b *lsm.Batch) bool {
	st, ok := stampOf(ctx)
	if ok {
		b.Set(groupMetaKey(metaGroupApplied, st.Group), appendUint64(nil, st.Index))
	}
	return ok
}

// commitTimestamps returns the first of n commit timestamps for a write
// under ctx of entities whose newest timestamp is floor: the store's clock
// for an ordinary write, the stamp's for a replicated one, raised past
// floor if it is not already past it (see Stamp).
func (s *Store) commitTimestamps(ctx context.Context, n int, floor odata.DateTime) (odata.DateTime, error) {
	st, ok := stampOf(ctx)
	if !ok {
		return s.clock.next(n, floor)
	}
	ts := max(st.Timestamp, floor+1)
	s.clock.observe(ts + odata.DateTime(n) - 1)
	return ts, nil
}

// AppliedIndex returns the index of the last stamped write of group
// whose data the engine holds (0 when none): the point the group's
// replica replays its log from. Stamped writes are not synced, so after a
// crash it may be behind the last one applied before it.
//
// A store written before applied indexes were kept per group holds one
// index, under the legacy key, which is group 1's (the one group a
// cluster had then) until group 1 records an index of its own.
func (s *Store) AppliedIndex(group uint64) (uint64, error) {
	return readAppliedIndex(s.db, group)
}

// readAppliedIndex reads group's applied index from the DB or from a
// snapshot of it (see AppliedIndex).
func readAppliedIndex(rd reader, group uint64) (uint64, error) {
	v, err := rd.Get(groupMetaKey(metaGroupApplied, group))
	if errors.Is(err, lsm.ErrNotFound) && group == legacyAppliedGroup {
		v, err = rd.Get(metaKey(metaApplied))
	}
	switch {
	case errors.Is(err, lsm.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("partition: read applied index of group %d: %w", group, err)
	case len(v) != 8:
		return 0, fmt.Errorf("partition: applied index of group %d: %d bytes: %w", group, len(v), lsm.ErrCorruption)
	}
	return binary.BigEndian.Uint64(v), nil
}

// SyncApplied records index as group's applied index, synced, which makes
// every write applied before it durable: the group's log up to index may
// then be discarded. It must be called from the goroutine that applies
// the group's stamped writes, with the index of the last command that
// goroutine applied (whether it wrote anything or not).
func (s *Store) SyncApplied(group, index uint64) error {
	b := s.db.NewBatch()
	setAppliedIndex(b, group, index)
	if err := s.db.Apply(b, s.syncWO); err != nil {
		return fmt.Errorf("partition: sync applied index of group %d: %w", group, err)
	}
	return nil
}

// SyncAppliedIndexes is SyncApplied for several groups in one synced
// write: applied maps each group to its index. It must be called from
// the goroutine that applies their stamped writes.
func (s *Store) SyncAppliedIndexes(applied map[uint64]uint64) error {
	b := s.db.NewBatch()
	for group, index := range applied {
		setAppliedIndex(b, group, index)
	}
	if err := s.db.Apply(b, s.syncWO); err != nil {
		return fmt.Errorf("partition: sync the applied indexes of %d groups: %w", len(applied), err)
	}
	return nil
}

// setAppliedIndex adds to b the write of group's applied index. Group 1's
// also drops the legacy key, which its own key now supersedes, so that a
// store migrates off it at the first synced index and no reader meets a
// stale legacy value.
func setAppliedIndex(b *lsm.Batch, group, index uint64) {
	b.Set(groupMetaKey(metaGroupApplied, group), appendUint64(nil, index))
	if group == legacyAppliedGroup {
		b.Delete(metaKey(metaApplied))
	}
}
