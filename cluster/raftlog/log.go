// Package raftlog keeps the raft log, hard state and conf state of every
// raft group of a node in one lsm.DB of its own (docs/raftlog.md).
//
// A Log is the engine; Group returns one group's Storage, which implements
// raft.Storage for a RawNode. Writes are gathered across groups in a Write
// and committed as one lsm batch, so one turn of the node loop costs one
// fsync whatever the number of groups it touched. Each Storage keeps its
// hard state, conf state, first and last index in memory, and the newest
// entries in a cache; older entries are read from the engine.
//
// Snapshots are not implemented: once a group's log has been compacted,
// Snapshot returns raft.ErrSnapshotTemporarilyUnavailable, so a follower
// that needs entries below the first index is not caught up until
// snapshots exist (docs/raftlog.md, "Limitations").
package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/tabuladb/tabula/internal/shrink"
	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// DefaultCacheEntries is the number of entries per group a Storage keeps
// in memory when Options.CacheEntries is zero.
const DefaultCacheEntries = 4096

// DefaultCacheBytes bounds a group's cached entries when
// Options.CacheBytes is not positive: 4096 entries of a few hundred bytes, or a
// few dozen large batches.
const DefaultCacheBytes = 2 << 20

// ErrClosed is returned by writes to a closed Log.
var ErrClosed = errors.New("raftlog: closed")

// Options configure a Log. A nil *Options means the defaults.
type Options struct {
	// FS is the filesystem; nil means the OS filesystem.
	FS vfs.FS
	// CacheEntries is the number of a group's newest entries kept in
	// memory for Entries and Term: 0 means DefaultCacheEntries, a negative
	// value none (every read goes to the engine).
	CacheEntries int
	// CacheBytes bounds the size of a group's cached entries (their data,
	// and 64 bytes each for the rest): 0 or less means DefaultCacheBytes. A node's
	// entry caches are at most this times its groups that are not idle:
	// an idle group's cache is dropped (Storage.DropCache).
	CacheBytes int64
	// MemTableSize is the engine's memtable size in bytes; 0 means the
	// lsm default. Tests and fuzzing make it small.
	MemTableSize int64
}

// Log is the raft-log engine of a node: the state of every raft group of
// the node in one lsm.DB. Its methods are safe for concurrent use.
type Log struct {
	dir          string
	db           *lsm.DB
	cacheEntries int
	cacheBytes   int64

	// buffers holds *writeBuffers for Commit to reuse.
	buffers sync.Pool

	mu     sync.Mutex
	groups map[uint64]*Storage
	// groupsPeak is the most groups held since groups was last made
	// again (shrink.Map, in Unload).
	groupsPeak int
	// version is the format version on disk.
	version uint64
	// err is the sticky error of a failed write: once a write failed, no
	// other is attempted, since what the failed one left on disk is
	// unknown (an fsync failure cannot be retried safely).
	err    error
	closed bool
}

// Open opens (creating if needed) the log engine in dir and checks the
// state of every group it holds, so that a damaged log is refused at once;
// Group loads a group's state when it is first asked for. A directory
// written by a newer format version is refused.
func Open(dir string, opts *Options) (*Log, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case o.CacheEntries == 0:
		o.CacheEntries = DefaultCacheEntries
	case o.CacheEntries < 0:
		o.CacheEntries = 0
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	db, err := lsm.Open(dir, &lsm.Options{FS: o.FS, MemTableSize: o.MemTableSize})
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	l := &Log{dir: dir, db: db, cacheEntries: o.CacheEntries, cacheBytes: o.CacheBytes, groups: map[uint64]*Storage{}}
	if err := l.load(); err != nil {
		db.Close()
		return nil, err
	}
	return l, nil
}

// load checks the format version (writing it into a new engine) and the
// state of every group. It keeps none in memory: a node hosting many idle
// groups loads only those it starts (cluster's unloaded replicas).
func (l *Log) load() error {
	v, ok, err := l.get(formatVersionKey)
	if err != nil {
		return err
	}
	if !ok {
		it := l.db.NewIter(nil)
		nonEmpty := it.First()
		if err := it.Close(); err != nil {
			return fmt.Errorf("raftlog: %s: %w", l.dir, err)
		}
		if nonEmpty {
			return fmt.Errorf("raftlog: %s: %w: no format version key, but the engine holds keys", l.dir, lsm.ErrCorruption)
		}
		if err := l.db.Set(formatVersionKey, binary.AppendUvarint(nil, FormatVersion), &lsm.WriteOptions{Sync: true}); err != nil {
			return fmt.Errorf("raftlog: %s: writing the format version: %w", l.dir, err)
		}
		l.version = FormatVersion
		return nil
	}
	ver, n := binary.Uvarint(v)
	switch {
	case n <= 0 || n != len(v) || ver == 0:
		return fmt.Errorf("raftlog: %s: %w: format version value %x", l.dir, lsm.ErrCorruption, v)
	case ver > FormatVersion:
		return fmt.Errorf("raftlog: %s: format version %d is newer than this build's format version %d", l.dir, ver, FormatVersion)
	}
	l.version = ver
	ids, err := l.Groups()
	if err != nil {
		return err
	}
	for _, id := range ids {
		s := &Storage{log: l, id: id}
		if err := s.load(); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the engine. Writes after Close fail with ErrClosed; reads
// that need the engine fail too.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	return nil
}

// Groups lists the ids of the groups that have any state on disk, sorted.
func (l *Log) Groups() ([]uint64, error) {
	it := l.db.NewIter(&lsm.IterOptions{LowerBound: []byte{nsGroup}, UpperBound: []byte{nsGroup + 1}})
	var ids []uint64
	for ok := it.First(); ok; {
		k := it.Key()
		if len(k) < groupPrefixLen {
			it.Close()
			return nil, fmt.Errorf("raftlog: %s: %w: malformed key %x", l.dir, lsm.ErrCorruption, k)
		}
		id := binary.BigEndian.Uint64(k[1:])
		ids = append(ids, id)
		if id == ^uint64(0) {
			break
		}
		ok = it.SeekGE(groupPrefix(id + 1))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("raftlog: %s: %w", l.dir, err)
	}
	return ids, nil
}

// Group returns the storage of group id: the one in memory, or one
// loaded from the engine (the group's state was never loaded, or was
// unloaded), empty (and not written) if the engine has none.
func (l *Log) Group(id uint64) (*Storage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.groups[id]; s != nil {
		return s, nil
	}
	s := &Storage{log: l, id: id}
	if err := s.load(); err != nil {
		return nil, err
	}
	l.groups[id] = s
	return s, nil
}

// LoadedGroups returns how many groups' states the Log holds in memory.
func (l *Log) LoadedGroups() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.groups)
}

// Unload drops group id's state from memory; the next Group loads it from
// the engine again. A node with many idle groups keeps only the ones at
// work in memory. The caller must not use the group's old Storage again,
// nor have a Write of the group under way.
func (l *Log) Unload(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.groupsPeak = max(l.groupsPeak, len(l.groups))
	delete(l.groups, id)
	// Groups are loaded in bulk at times (a node's start, a peer's
	// restart waking them): their table goes once most are unloaded.
	l.groups = shrink.Map(l.groups, &l.groupsPeak)
}

// writable returns the error that forbids writing, if any.
func (l *Log) writable() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return ErrClosed
	case l.err != nil:
		return fmt.Errorf("raftlog: writes stopped by an earlier failure: %w", l.err)
	}
	return nil
}

// fail makes err the sticky error of the Log and returns it.
func (l *Log) fail(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
	return err
}

// apply writes b; a failure is sticky.
func (l *Log) apply(b *lsm.Batch, sync bool) error {
	if err := l.db.Apply(b, &lsm.WriteOptions{Sync: sync}); err != nil {
		return l.fail(fmt.Errorf("raftlog: %s: %w", l.dir, err))
	}
	return nil
}

// get returns the value of key, if any.
func (l *Log) get(key []byte) ([]byte, bool, error) {
	v, err := l.db.Get(key)
	switch {
	case errors.Is(err, lsm.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("raftlog: %s: %w", l.dir, err)
	}
	return v, true, nil
}

// sortedIDs returns the keys of m in order.
func sortedIDs[V any](m map[uint64]V) []uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// DeleteGroup deletes every record of group id (entries, hard state,
// conf state, snapshot position, replica record) in one synced batch and
// forgets its storage: the group is gone from the node, or starts again
// from nothing. The caller must not use the group's old Storage again.
func (l *Log) DeleteGroup(id uint64) error {
	if err := l.writable(); err != nil {
		return err
	}
	s, err := l.Group(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var b lsm.Batch
	if err := l.deleteAll(&b, id); err != nil {
		return err
	}
	if err := l.apply(&b, true); err != nil {
		return err
	}
	l.mu.Lock()
	delete(l.groups, id)
	l.mu.Unlock()
	return nil
}

// deleteAll adds to b the deletion of every key of group id.
func (l *Log) deleteAll(b *lsm.Batch, id uint64) error {
	it := l.db.NewIter(&lsm.IterOptions{LowerBound: groupPrefix(id), UpperBound: groupUpperBound(id)})
	for ok := it.First(); ok; ok = it.Next() {
		b.Delete(it.Key())
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("raftlog: %s: group %d: %w", l.dir, id, err)
	}
	return nil
}
