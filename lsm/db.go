package lsm

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/memtable"
	"github.com/tabuladb/tabula/sstable"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
)

// DB is an open database. All methods are safe for concurrent use.
type DB struct {
	dir        string
	opts       Options
	fs         vfs.FS
	dirLock    io.Closer
	blockCache *sstable.Cache
	tableCache *tableCache

	commit commitPipeline
	// visibleSeq is the newest sequence number readers may see: every
	// batch at or below it is fully applied (and durable, if synced).
	visibleSeq atomic.Uint64
	// closed is set first thing in Close so readers fail fast.
	closed atomic.Bool

	// mu guards the fields below it. Lock order: commit.mu, then mu, then
	// readState.mu.
	mu   sync.Mutex
	cond sync.Cond // signalled when a flush or compaction finishes
	mem  struct {
		// mutable is replaced only with both commit.mu and mu held, so
		// either lock suffices to read it.
		mutable *memTable
		queue   []*memTable // full memtables waiting for flush, oldest first
		// flushWaiters counts the Flush calls waiting: while there are
		// any, queued memtables are flushed however little they hold.
		flushWaiters int
		// size is the arena size the mutable memtable got: the first
		// gets Options.InitialMemTableSize, and each rotation doubles it
		// up to Options.MemTableSize.
		size int64
	}
	// log is the WAL segment the mutable memtable's writes go to. It is
	// replaced only with both commit.mu and mu held.
	log struct {
		num    uint64
		file   vfs.File
		writer *wal.Writer
		// previousClosed waits until the segment before this one is
		// closed (rotateMemTable closes it in the background) and returns
		// the close's error; nil for the first segment of a run.
		previousClosed func() error
	}
	versions   *versionSet
	snapshots  snapshotList
	compacting bool // a compaction (automatic or manual) is running
	// bgErr is the sticky error of a failed flush, compaction or WAL write:
	// once set, writes fail with it; reads still work.
	bgErr error
	// stopped is set, under mu, once bgErr is: writers look at it
	// without taking mu.
	stopped atomic.Bool

	readState struct {
		mu  sync.RWMutex
		val *readState
	}

	obsolete struct {
		mu     sync.Mutex
		tables []*fileMetadata
	}

	flushSignal   chan struct{}
	compactSignal chan struct{}
	cleanSignal   chan struct{}
	closing       chan struct{}
	bgWG          sync.WaitGroup

	metrics dbMetrics
	// slowdown paces writes while L0 is large (slowdown.go).
	slowdown pacer
	// pace, if set, ties the mutable memtable's fill to the flush ahead
	// of it (pace.go). Replaced with the mutable memtable.
	pace atomic.Pointer[writePace]
	// flushTail is the share of the last flush's time spent finishing its
	// table, after reading its memtables (float64 bits; pace.go).
	flushTail atomic.Uint64
	// walBlocks are the in-memory blocks of the WAL segments' writers,
	// shared by a segment and the next (wal.WriterOptions.Blocks).
	walBlocks *wal.BlockPool
	// logs keeps retired WAL segments' files for new segments to reuse.
	logs logRecycler
	// batches recycles the batches of Set and Delete (singleWrite).
	batches sync.Pool
	// tableScratch keeps the sstable writers' memory between tables.
	tableScratch scratchList
	// beforeCompactStep, if set (by tests), runs before each level step
	// of Compact, where an automatic compaction may run.
	beforeCompactStep func(level int)
}

// memTable is a memtable together with the WAL segment that holds its writes.
type memTable struct {
	*memtable.MemTable
	logNum uint64
	// firstSeq is the sequence number the memtable's first entry gets
	// (the next one when it became the mutable memtable), and lastSeq the
	// last one assigned when it was rotated out; its flush waits until
	// that is visible. A batch's entries take consecutive numbers, so a
	// rotated memtable holds lastSeq-firstSeq+1 entries.
	firstSeq, lastSeq base.SeqNum
	// logClosed, set when the rotation that queued the memtable also
	// started a new WAL segment, waits until the memtable's segment is
	// closed and returns the close's error: its file is reused only then
	// (the close's last writes would land in the next segment's records).
	logClosed func() error
	// refs counts the DB's reference, held while the memtable is the
	// mutable one or queued for flush (or until Close), one per readState
	// holding it (iterators and reads hold a readState), and one per batch
	// being inserted. At zero nothing can read or write the memtable any
	// more, and its arena is released.
	refs atomic.Int32
	db   *DB
	// reserved is the arena room promised to batches: the bound
	// Batch.memSize of every batch given room (under commit.mu) whose
	// insert is under way, and the exact size of every finished one. It
	// never falls below what the arena holds, so a batch given room always
	// fits, however many are inserted at once.
	reserved atomic.Int64
	// flushed counts the entries its flush has read back (progressIter),
	// math.MaxInt64 once the flush is installed: how far the flush is,
	// for the pace of the memtable after it (pace.go).
	flushed atomic.Int64
	// flushStart and readEnd are when its flush began and ended reading
	// it (Unix nanoseconds, 0 before): the pace times the flush's rest
	// (flushedShare).
	flushStart, readEnd atomic.Int64
	// hint is the Inserter of the last batch inserted alone: the next
	// batch takes it if no other insert holds it, so that a sequential
	// load keeps skipping the skiplist search from batch to batch.
	hint struct {
		sync.Mutex
		ins memtable.Inserter
	}
}

// reserve gives a batch of memSize bytes room in the memtable, or reports
// false. Called with commit.mu held, which orders reservations.
func (m *memTable) reserve(memSize int) bool {
	if int64(memSize) > int64(m.Capacity())-m.reserved.Load() {
		return false
	}
	m.reserved.Add(int64(memSize))
	return true
}

// unwritten reports whether no batch was given room in the memtable, so
// none has a record in its WAL segment either; a batch given room may not
// be inserted yet, so Empty does not tell that.
func (m *memTable) unwritten() bool { return m.reserved.Load() == 0 }

// insert adds the entries of b, which reserve gave room, to the memtable.
// Batches are inserted concurrently, each through an Inserter of its own.
func (m *memTable) insert(b *Batch) error {
	var own memtable.Inserter
	ins := &own
	if m.hint.TryLock() {
		defer m.hint.Unlock()
		ins = &m.hint.ins
	}
	r, err := newBatchReader(b.repr)
	if err != nil {
		return err
	}
	used := 0
	for {
		key, value, ok, err := r.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		n, err := m.Insert(ins, key, value)
		if err != nil {
			return fmt.Errorf("lsm: memtable insert: %w", err)
		}
		used += n
	}
	m.reserved.Add(int64(used - b.memSize))
	return nil
}

// newMemTable returns a memtable of size bytes on WAL segment logNum, with
// the DB's reference. Its arena is mapped outside the Go heap: a fresh
// mapping costs no zeroing under the commit lock (the kernel zeroes pages
// as entries first touch them), and the arenas, up to a few times
// MemTableSize, do not inflate the heap the garbage collector paces itself
// by. The last unref releases it. Called with commit.mu held (or while
// Open has the DB to itself), so that no batch takes a sequence number
// meanwhile.
func (db *DB) newMemTable(size int64, logNum uint64) *memTable {
	m := &memTable{MemTable: memtable.NewOffHeap(int(size)), logNum: logNum, db: db}
	m.firstSeq = base.SeqNum(db.commit.logSeq.Load()) + 1
	m.refs.Store(1)
	return m
}

func (m *memTable) ref() { m.refs.Add(1) }

func (m *memTable) unref() {
	switch n := m.refs.Add(-1); {
	case n == 0:
		m.Release()
	case n < 0:
		panic("lsm: memtable released more often than referenced")
	}
}

// readState is what a read needs: the memtables and the current version,
// pinned together. It is replaced (under DB.mu) whenever one of them
// changes; readers load it with a reference.
type readState struct {
	refs    atomic.Int32
	mem     *memTable
	queue   []*memTable // oldest first
	current *version
}

func (rs *readState) unref() {
	if rs.refs.Add(-1) == 0 {
		rs.current.unref()
		rs.mem.unref()
		for _, m := range rs.queue {
			m.unref()
		}
	}
}

// loadReadState returns the current readState with a reference the caller
// must drop with unref, or nil once the DB is closed.
func (db *DB) loadReadState() *readState {
	db.readState.mu.RLock()
	defer db.readState.mu.RUnlock()
	rs := db.readState.val
	if rs == nil || db.closed.Load() {
		return nil
	}
	rs.refs.Add(1)
	return rs
}

// updateReadState publishes a readState for the current memtables and
// version. Called with db.mu held.
func (db *DB) updateReadState() {
	rs := &readState{
		mem:     db.mem.mutable,
		queue:   slices.Clone(db.mem.queue),
		current: db.versions.current,
	}
	rs.refs.Store(1)
	rs.current.ref()
	rs.mem.ref()
	for _, m := range rs.queue {
		m.ref()
	}
	db.readState.mu.Lock()
	old := db.readState.val
	db.readState.val = rs
	db.readState.mu.Unlock()
	if old != nil {
		old.unref()
	}
}

// Get returns a copy of the newest value of key, or ErrNotFound.
func (db *DB) Get(key []byte) ([]byte, error) {
	// Load the state before the sequence number: a version installed after
	// the load cannot matter, and every write at or below the sequence
	// number is in the loaded state.
	rs := db.loadReadState()
	if rs == nil {
		return nil, ErrClosed
	}
	defer rs.unref()
	return db.getCopy(rs, key, base.SeqNum(db.visibleSeq.Load()))
}

// GetFunc calls fn with the newest value of key, or returns ErrNotFound,
// as Get does, without copying it: the value aliases the engine's memory
// (a memtable's arena, unmapped once the memtable is flushed, or a cached
// block), so fn must not keep it, or anything of it, past its return,
// nor change it. It saves Get's allocation and copy on a read whose
// caller decodes the value at once.
func (db *DB) GetFunc(key []byte, fn func(value []byte)) error {
	rs := db.loadReadState() // held while fn runs: the arenas stay mapped
	if rs == nil {
		return ErrClosed
	}
	defer rs.unref()
	v, err := db.get(rs, key, base.SeqNum(db.visibleSeq.Load()))
	if err != nil {
		return err
	}
	defer v.Release()
	fn(v.Bytes)
	return nil
}

// GetApplied is Get at the newest assigned sequence number instead of the
// visible one: it returns a copy of the newest value of key among all the
// batches Enqueue (or Apply) has accepted, including those whose Wait has
// not yet returned, which are not yet durable and which Get, iterators and
// snapshots do not see yet. Such a value may still be lost: if the WAL
// sync fails, its batch is never acknowledged.
//
// It is only for a caller that itself serializes every write to key (a
// partition latch holder, say) and must check a condition, such as an
// ETag, against the write of its predecessor under that serialization,
// which may still be pending: its own write is then enqueued behind the
// predecessor's, so it commits only if the predecessor does (a failed sync
// stops all later writes). If it answers from the value instead of
// writing (the condition failed), it must call WaitVisible first (after
// releasing its lock) with the Seq of the last write it serializes, so the
// answer never rests on a write that is then lost. Everyone else must use Get: a value GetApplied returns may never
// be acknowledged, and for a key written concurrently by unserialized
// writers it may even come from a batch whose other writes are still
// being inserted.
//
// A pending write is always found: the memtable holding it is flushed
// only after the write is visible, and the memtables and tables are
// replaced together in the read state, so the write is in whichever of
// them the loaded state has.
func (db *DB) GetApplied(key []byte) ([]byte, error) {
	// As in Get, the state is loaded first: every write the caller's
	// predecessor enqueued (which happened before this call) is in it, and
	// logSeq, loaded after, is at least its sequence number.
	rs := db.loadReadState()
	if rs == nil {
		return nil, ErrClosed
	}
	defer rs.unref()
	return db.getCopy(rs, key, base.SeqNum(db.commit.logSeq.Load()))
}

// WaitVisible waits until the batch a PendingCommit.Seq names, and so
// every batch enqueued before it, is committed: visible and, if synced,
// durable. It returns the sync error that stopped the DB if one of them
// failed instead, and at once if the batch is already visible.
//
// It is GetApplied's counterpart for a decision that is not a write: a
// caller that answers from a value GetApplied returned (a condition that
// failed, say) waits for the last batch that could have written it, so
// that the answer never reveals a write that is then lost.
func (db *DB) WaitVisible(seq uint64) error {
	if db.visibleSeq.Load() >= seq {
		return nil
	}
	c := &db.commit
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	return db.waitVisibleLocked(base.SeqNum(seq))
}

// get returns the newest value of key at seq, or ErrNotFound. A value
// from a memtable aliases its arena, mapped while rs is held; one from a
// table holds its block. The caller releases it.
func (db *DB) get(rs *readState, key []byte, seq base.SeqNum) (sstable.Value, error) {
	if v, kind, ok := rs.mem.Get(key, seq); ok {
		return foundValue(sstable.Value{Bytes: v, Kind: kind})
	}
	for i := len(rs.queue) - 1; i >= 0; i-- {
		if v, kind, ok := rs.queue[i].Get(key, seq); ok {
			return foundValue(sstable.Value{Bytes: v, Kind: kind})
		}
	}
	for _, f := range rs.current.levels[0] {
		if bytes.Compare(key, f.smallest.UserKey) < 0 || bytes.Compare(key, f.largest.UserKey) > 0 {
			continue
		}
		if v, ok, err := db.tableGet(f, key, seq); err != nil || ok {
			if err != nil {
				return sstable.Value{}, err
			}
			return foundValue(v)
		}
	}
	for level := 1; level < NumLevels; level++ {
		files := rs.current.levels[level]
		i, _ := slices.BinarySearchFunc(files, key, func(f *fileMetadata, k []byte) int {
			return bytes.Compare(f.largest.UserKey, k)
		})
		if i == len(files) || bytes.Compare(key, files[i].smallest.UserKey) < 0 {
			continue
		}
		if v, ok, err := db.tableGet(files[i], key, seq); err != nil || ok {
			if err != nil {
				return sstable.Value{}, err
			}
			return foundValue(v)
		}
	}
	return sstable.Value{}, ErrNotFound
}

// getCopy is get with a copy of the value, which outlives rs.
func (db *DB) getCopy(rs *readState, key []byte, seq base.SeqNum) ([]byte, error) {
	v, err := db.get(rs, key, seq)
	if err != nil {
		return nil, err
	}
	defer v.Release()
	return slices.Clone(v.Bytes), nil
}

func (db *DB) tableGet(f *fileMetadata, key []byte, seq base.SeqNum) (sstable.Value, bool, error) {
	r, e, err := db.tableCache.acquire(f)
	if err != nil {
		return sstable.Value{}, false, err
	}
	// The value holds its block, not the table: the table may be closed
	// before the value is released.
	v, ok, err := r.Get(key, seq)
	db.tableCache.release(e)
	return v, ok, err
}

// foundValue returns the value found, or ErrNotFound (with the value
// released) for a deletion.
func foundValue(v sstable.Value) (sstable.Value, error) {
	if v.Kind == base.KindDelete {
		v.Release()
		return sstable.Value{}, ErrNotFound
	}
	return v, nil
}

// Err returns the error that stopped writes, or nil while the DB takes
// them: a failed WAL write or sync, flush or compaction. It is sticky;
// every later write, Flush and Compact fails with it, while reads keep
// working. Reopening the DB (once the disk is healthy) recovers every
// acknowledged write, except after a failure of the WAL itself (a write,
// fsync or close of a segment, or the directory fsync that makes a new
// segment's name durable): unsynced writes acknowledged before it may be
// lost with the records the log's writer held.
func (db *DB) Err() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.bgErr
}

// Set writes value under key.
func (db *DB) Set(key, value []byte, wo *WriteOptions) error {
	return db.singleWrite(base.KindSet, key, value, wo)
}

// Delete removes key. Deleting an absent key is not an error.
func (db *DB) Delete(key []byte, wo *WriteOptions) error {
	return db.singleWrite(base.KindDelete, key, nil, wo)
}

// maxPooledBatch bounds the encoding a batch may keep when it goes back to
// the pool, so that one huge value does not pin its memory.
const maxPooledBatch = 64 << 10

// singleWrite applies a batch of one write through a recycled Batch. A
// fresh one per call allocated its encoding, and grew it, every time:
// garbage that a stream of small synced writes, slow enough that the
// collector rarely runs, turned into megabytes of heap. Apply does not
// retain the batch (Enqueue copies it), so it is free again on return.
func (db *DB) singleWrite(kind base.Kind, key, value []byte, wo *WriteOptions) error {
	b, _ := db.batches.Get().(*Batch)
	if b == nil {
		b = new(Batch)
	}
	b.add(kind, key, value)
	err := db.Apply(b, wo)
	if cap(b.repr) <= maxPooledBatch {
		b.Reset()
		db.batches.Put(b)
	}
	return err
}

// NewIter returns an iterator over the latest state of the DB. It must be
// closed.
func (db *DB) NewIter(o *IterOptions) *Iterator {
	rs := db.loadReadState()
	if rs == nil {
		return &Iterator{err: ErrClosed}
	}
	return db.newIter(rs, base.SeqNum(db.visibleSeq.Load()), o)
}
