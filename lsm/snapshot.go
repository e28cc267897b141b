package lsm

import (
	"container/list"

	"github.com/tabuladb/tabula/internal/base"
)

// Snapshot is a consistent, read-only view of the DB as of its creation.
// Compactions keep every version a live snapshot can see. Close it when done.
type Snapshot struct {
	db   *DB
	seq  base.SeqNum
	elem *list.Element // in db.snapshots; nil once closed
}

// snapshotList holds the live snapshots in creation order, which is also
// ascending sequence-number order. Guarded by DB.mu.
type snapshotList struct {
	l list.List
}

func (s *snapshotList) seqNums() []base.SeqNum {
	out := make([]base.SeqNum, 0, s.l.Len()+1)
	for e := s.l.Front(); e != nil; e = e.Next() {
		seq := e.Value.(*Snapshot).seq
		if n := len(out); n == 0 || out[n-1] != seq {
			out = append(out, seq)
		}
	}
	return out
}

// NewSnapshot returns a snapshot of the DB's current state.
func (db *DB) NewSnapshot() *Snapshot {
	db.mu.Lock()
	defer db.mu.Unlock()
	s := &Snapshot{db: db, seq: base.SeqNum(db.visibleSeq.Load())}
	s.elem = db.snapshots.l.PushBack(s)
	return s
}

// Get returns a copy of key's value as of the snapshot, or ErrNotFound.
func (s *Snapshot) Get(key []byte) ([]byte, error) {
	if s.elem == nil {
		return nil, ErrClosed
	}
	rs := s.db.loadReadState()
	if rs == nil {
		return nil, ErrClosed
	}
	defer rs.unref()
	return s.db.getCopy(rs, key, s.seq)
}

// NewIter returns an iterator over the snapshot. It must be closed.
func (s *Snapshot) NewIter(o *IterOptions) *Iterator {
	if s.elem == nil {
		return &Iterator{err: ErrClosed}
	}
	rs := s.db.loadReadState()
	if rs == nil {
		return &Iterator{err: ErrClosed}
	}
	return s.db.newIter(rs, s.seq, o)
}

// Close releases the snapshot, letting compactions drop what only it saw.
func (s *Snapshot) Close() error {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	if s.elem == nil {
		return ErrClosed
	}
	s.db.snapshots.l.Remove(s.elem)
	s.elem = nil
	return nil
}
