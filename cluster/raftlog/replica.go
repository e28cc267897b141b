package raftlog

import (
	"encoding/binary"
	"fmt"

	"github.com/tabuladb/tabula/lsm"
)

// Replica is what a node records of its own member of a group, beside
// the group's raft state (docs/raftlog.md, the replica record): the raft
// id it has there, the log position its conf state is as of, and whether
// the group removed it.
type Replica struct {
	// ID is the member's raft id in the group; 0 when none was recorded,
	// which the caller reads as its default (a node's founding member of
	// a group has the node's own id).
	ID uint64
	// ConfIndex is the index of the entry, or of the snapshot, that the
	// stored conf state is as of; 0 when unknown (a bootstrap's conf
	// state, or one written by format version 1).
	ConfIndex uint64
	// Removed says the group removed this member: the group holds no
	// other state here, and its id is never to be used again on this
	// node (a message for it is from before the removal).
	Removed bool
}

// replicaRemoved is the record's flag byte of a removed member.
const replicaRemoved = 1

func (r Replica) encode() []byte {
	v := binary.AppendUvarint(nil, r.ID)
	v = binary.AppendUvarint(v, r.ConfIndex)
	var flags byte
	if r.Removed {
		flags = replicaRemoved
	}
	return append(v, flags)
}

func decodeReplica(v []byte) (Replica, error) {
	var r Replica
	id, n := binary.Uvarint(v)
	if n <= 0 {
		return r, fmt.Errorf("%w: replica record %x: bad id", lsm.ErrCorruption, v)
	}
	v = v[n:]
	ci, n := binary.Uvarint(v)
	if n <= 0 {
		return r, fmt.Errorf("%w: replica record: bad conf index", lsm.ErrCorruption)
	}
	v = v[n:]
	if len(v) != 1 || v[0] > replicaRemoved {
		return r, fmt.Errorf("%w: replica record: bad flags %x", lsm.ErrCorruption, v)
	}
	return Replica{ID: id, ConfIndex: ci, Removed: v[0] == replicaRemoved}, nil
}

// Replica returns the group's replica record: the zero Replica when none
// was written.
func (s *Storage) Replica() Replica {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rec
}

// SetReplicaID records the raft id of the node's member of a group.
func (w *Write) SetReplicaID(group, id uint64) {
	w.group(group).replicaID = id
}

// RemoveReplica records that the group removed the node's member id: the
// group's entries, hard state and conf state are deleted, and a replica
// record marked removed is all that stays, in one synced batch. The id
// is then refused for good (Replica().Removed); DeleteGroup forgets the
// record too, when the group itself is gone.
func (l *Log) RemoveReplica(group, id uint64) error {
	return l.resetGroup(group, Replica{ID: id, Removed: true})
}

// StartReplica makes the group new to the node, its member there id:
// whatever the group held is deleted and a replica record naming id is
// all it holds, in one synced batch. The member has no configuration
// until a snapshot brings one.
func (l *Log) StartReplica(group, id uint64) error {
	return l.resetGroup(group, Replica{ID: id})
}

func (l *Log) resetGroup(group uint64, rec Replica) error {
	if err := l.writable(); err != nil {
		return err
	}
	s, err := l.Group(group)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var b lsm.Batch
	if err := l.deleteAll(&b, group); err != nil {
		return err
	}
	b.Set(stateKey(group, kindReplica), rec.encode())
	l.upgradeForRecord(&b)
	if err := l.apply(&b, true); err != nil {
		return err
	}
	l.recordWritten()
	s.hs, s.cs, s.truncIndex, s.truncTerm, s.last, s.cache, s.cacheBytes = nil, nil, 0, 0, 0, nil, 0
	s.rec = rec
	return nil
}

// Empty reports whether nothing of the group is stored, not even a
// replica record.
func (s *Storage) Empty() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return !s.hasState()
}

// upgradeForRecord adds to b the move of a version-1 log to the version
// that holds replica records.
func (l *Log) upgradeForRecord(b *lsm.Batch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.version < formatVersionRecord {
		b.Set(formatVersionKey, binary.AppendUvarint(nil, formatVersionRecord))
	}
}

// recordWritten notes that a write holding a replica record (and the
// upgrade upgradeForRecord added to it) is on disk.
func (l *Log) recordWritten() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.version = max(l.version, formatVersionRecord)
}
