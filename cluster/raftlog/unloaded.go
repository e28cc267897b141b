package raftlog

import (
	"encoding/binary"
	"fmt"

	"github.com/tabuladb/tabula/lsm"
)

// Unloaded records: what a node keeps of a replica it took out of memory
// (the cluster's unloaded replicas), under keys of their own beside the
// groups' raft state (docs/raftlog.md), so that the node's memory does not
// grow with the replicas it hosts. The values are the caller's; the Log
// only stores them.
//
// They are written unsynced: a node that starts again clears them
// (ClearUnloaded) and records its idle groups afresh, so a crash that
// loses some loses nothing the node reads.

// unloadedKey is the key of group's unloaded record.
func unloadedKey(group uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, unloadedKeyLen), nsUnloaded), group)
}

// Unloaded returns group's unloaded record, if there is one.
func (l *Log) Unloaded(group uint64) ([]byte, bool, error) {
	return l.get(unloadedKey(group))
}

// SetUnloaded writes the unloaded records of recs' groups, in one batch
// (not synced).
func (l *Log) SetUnloaded(recs map[uint64][]byte) error {
	if err := l.writable(); err != nil {
		return err
	}
	var b lsm.Batch
	for group, rec := range recs {
		b.Set(unloadedKey(group), rec)
	}
	return l.apply(&b, false)
}

// DeleteUnloaded deletes group's unloaded record, if any (not synced).
func (l *Log) DeleteUnloaded(group uint64) error {
	if err := l.writable(); err != nil {
		return err
	}
	var b lsm.Batch
	b.Delete(unloadedKey(group))
	return l.apply(&b, false)
}

// EachUnloaded calls fn with every unloaded record, in group order, until
// fn returns false. The records are those of one moment: writes during the
// walk are not seen. fn must not keep rec.
func (l *Log) EachUnloaded(fn func(group uint64, rec []byte) bool) error {
	it := l.db.NewIter(&lsm.IterOptions{LowerBound: []byte{nsUnloaded}, UpperBound: []byte{nsUnloaded + 1}})
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != unloadedKeyLen {
			it.Close()
			return fmt.Errorf("raftlog: %s: %w: malformed unloaded record key %x", l.dir, lsm.ErrCorruption, k)
		}
		if !fn(binary.BigEndian.Uint64(k[1:]), it.Value()) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("raftlog: %s: %w", l.dir, err)
	}
	return nil
}

// clearBatch is how many records ClearUnloaded deletes per batch.
const clearBatch = 10_000

// ClearUnloaded deletes every unloaded record, in batches (not synced),
// and returns how many it deleted.
func (l *Log) ClearUnloaded() (int, error) {
	if err := l.writable(); err != nil {
		return 0, err
	}
	deleted := 0
	for {
		var b lsm.Batch
		if err := l.EachUnloaded(func(group uint64, _ []byte) bool {
			b.Delete(unloadedKey(group))
			return b.Len() < clearBatch
		}); err != nil {
			return deleted, err
		}
		if b.Len() == 0 {
			return deleted, nil
		}
		if err := l.apply(&b, false); err != nil {
			return deleted, err
		}
		deleted += b.Len()
	}
}
