package lsm

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
)

// commitPipeline orders writes. A batch goes through four steps:
//
//  1. Under mu: give the batch room in the mutable memtable (rotating it
//     when full), take the next sequence numbers and append the batch to
//     the WAL (a copy into the log writer's buffer, no I/O wait). Holding
//     mu keeps WAL order equal to sequence order.
//  2. Outside mu, insert the batch into the memtable it was given room in.
//     The memtable takes concurrent writers, so batches ordered one after
//     another are inserted in parallel, and the lock is held only for the
//     cheap ordering, not for the search of the skiplist (cache misses).
//  3. Synced batches wait for the WAL to be fsynced past their record. The
//     log writer batches the waiters of many batches into one fsync: while
//     one fsync runs, the next batches queue behind it.
//  4. Publish: the visible sequence number advances over the prefix of
//     pending batches that are done (inserted, and synced if asked). A
//     batch is visible only once it and every batch before it are whole
//     in the memtable and, when synced, on disk, so readers never see a
//     write a crash could take back from a synced writer, and never part
//     of a batch.
//
// Apply runs the steps in one call. Enqueue (steps 1 and 2) and
// PendingCommit.Wait (steps 3 and 4) expose the split, for callers that
// serialize writes under their own lock and want to hold it only for the
// first two, so that the writers queued on that lock share fsyncs.
// GetApplied reads at logSeq, so such a caller can see the pending write of
// its predecessor, and WaitVisible lets it wait for what it saw to commit
// before it answers from it. A synced batch is marked synced only by its
// own Wait after its sync succeeded, so when a sync fails, no batch after
// the failed one (already enqueued or not) is ever published: failed makes
// their Waits fail, and the DB's sticky error stops new ones in step 1.
type commitPipeline struct {
	mu sync.Mutex
	// logSeq is the last sequence number assigned. Written under mu.
	logSeq atomic.Uint64

	pubMu   sync.Mutex
	pubCond sync.Cond
	pending []pendingBatch // in sequence order
	// failed is the sticky error of a failed WAL sync: nothing after the
	// failed batch is ever published.
	failed error
}

type pendingBatch struct {
	lastSeq base.SeqNum
	// steps counts what the batch still needs before it is done: its
	// insert, and its sync if it is synced.
	steps int8
}

// Apply writes the batch atomically: after it returns nil, every
// operation in it is visible to new reads and, unless wo says otherwise,
// durable. The batch may be reused after Apply returns. Apply is Enqueue
// followed by Wait.
func (db *DB) Apply(b *Batch, wo *WriteOptions) error {
	p, err := db.Enqueue(b, wo)
	if err != nil {
		return err
	}
	return p.Wait()
}

// PendingCommit is a batch that Enqueue has ordered, logged and inserted
// into the memtable, but that is not yet durable (if synced) or visible to
// readers. Wait completes it. It is a value, so that keeping it costs no
// allocation; Wait through one variable (a copy does not share the result
// of a Wait made through another).
//
// It exists so that a caller serializing its own writes (a lock per key
// range, like a table partition's latch) can release its lock once its
// write is ordered rather than once it is durable: the next writer under
// the lock orders its write behind this one (reading it with GetApplied if
// it must check a condition against it), and both wait for durability
// outside the lock, sharing one WAL fsync (group commit) instead of taking
// one each in turn.
type PendingCommit struct {
	db   *DB
	w    *wal.Writer // the WAL segment holding the record
	end  int64       // offset just past the record in that segment
	last base.SeqNum // the batch's last sequence number
	// sync: wait for the WAL fsync before publishing. published: step 1
	// already published the batch (the unsynced fast path, or an empty
	// batch), so there is nothing left to do.
	sync, published bool
	// waited and err are the result of the first Wait.
	waited bool
	err    error
}

// Enqueue runs the first step of committing b (see commitPipeline): when it
// returns nil, b holds its sequence numbers, is appended to the WAL buffer
// and is in the memtable, and every batch enqueued later is ordered after
// it. It is not yet durable, nor visible to Get, iterators or snapshots
// (an unsynced batch may already be); only GetApplied sees it. Enqueue
// never waits for I/O, but may wait for room in the memtables (a write
// stall), or be paced while L0 is large (slowdown.go), like Apply.
//
// The caller must call Wait on the result, and soon: no batch enqueued
// after this one becomes visible before Wait has run, and no memtable
// holding it is flushed before. So between Enqueue and Wait the caller
// must not wait for anything that may itself wait for this batch: another
// writer's commit (Apply, Wait), a Flush, or its own next Enqueue when
// that could stall for lack of memtable room (a stall waits for a flush).
// Releasing locks, as a partition latch holder does, is what it is for.
//
// Enqueue does not retain b: its contents are copied into the WAL buffer
// and the memtable, so b may be Reset and reused as soon as Enqueue
// returns, before Wait.
//
// An error from Enqueue means the batch is not committed and needs no
// Wait; like Apply's, it is usually the DB's sticky write error (see Err).
func (db *DB) Enqueue(b *Batch, wo *WriteOptions) (PendingCommit, error) {
	if b.err != nil {
		return PendingCommit{}, b.err
	}
	if b.empty() {
		return PendingCommit{db: db, published: true}, nil
	}
	sync := wo == nil || wo.Sync
	c := &db.commit

	db.slowWrite(b)
	db.paceWrite(b)
	c.mu.Lock()
	mem, err := db.makeRoomForWrite(b)
	if err != nil {
		c.mu.Unlock()
		return PendingCommit{}, err
	}
	first := base.SeqNum(c.logSeq.Load()) + 1
	last := first + base.SeqNum(b.count) - 1
	b.setSeqNum(first)
	w := db.log.writer
	end, err := w.WriteRecord(b.repr)
	if err != nil {
		mem.unref()
		err = db.failWrites(fmt.Errorf("lsm: write WAL %06d: %w", db.log.num, err))
		c.mu.Unlock()
		return PendingCommit{}, err
	}
	c.logSeq.Store(uint64(last))
	steps := int8(1)
	if sync {
		steps++
	}
	c.pubMu.Lock()
	c.pending = append(c.pending, pendingBatch{lastSeq: last, steps: steps})
	c.pubMu.Unlock()
	c.mu.Unlock()
	db.metrics.walBytesWritten.Add(int64(len(b.repr)))

	err = mem.insert(b)
	mem.unref()
	if err != nil {
		// The memtable had room (reserved above), so this is a malformed
		// batch that got past Set/Delete: nothing sane can follow, and
		// the batches after this one must not wait for it.
		return PendingCommit{}, db.failCommits(err)
	}
	p := PendingCommit{db: db, w: w, end: end, last: last, sync: sync}
	if visible := db.stepDone(last); visible && !sync {
		p.published = true
	}
	return p, nil
}

// Wait runs the rest of the commit (steps 2 and 3 of commitPipeline): it
// waits until the batch is durable (if synced) and then until it and every
// batch enqueued before it is visible. A nil result means the batch is
// committed exactly as Apply's nil means. An error means it is not
// acknowledged: the WAL write or sync failed, for this batch or one
// enqueued before it, and the DB has stopped taking writes, so no batch
// enqueued after the failure (including one that read this batch with
// GetApplied) is ever acknowledged either. A batch that failed may still
// be found after a reopen (its record may have reached the disk), as with
// any failed write.
//
// Later calls on the same PendingCommit return the first call's result.
// Wait must not be called concurrently with itself on one PendingCommit.
func (p *PendingCommit) Wait() error {
	if !p.waited {
		if p.db == nil {
			p.err = errors.New("lsm: Wait on a PendingCommit that Enqueue did not return")
		} else {
			p.err = p.finish()
		}
		p.waited = true
	}
	return p.err
}

// Seq is the batch's last sequence number, for WaitVisible; 0 for an
// empty batch.
func (p *PendingCommit) Seq() uint64 { return uint64(p.last) }

// finish is steps 2 and 3 of the pipeline for a batch Enqueue accepted.
func (p *PendingCommit) finish() error {
	if p.published {
		return nil
	}
	db := p.db
	if p.sync {
		if err := p.w.SyncTo(p.end); err != nil {
			return db.failCommits(fmt.Errorf("lsm: sync WAL: %w", err))
		}
		db.stepDone(p.last)
	}
	c := &db.commit
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	return db.waitVisibleLocked(p.last)
}

// stepDone records that the pending batch ending at last finished a step,
// advances the visible sequence number over the prefix of pending batches
// that are done, and reports whether last is now visible.
func (db *DB) stepDone(last base.SeqNum) bool {
	c := &db.commit
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	for i := range c.pending {
		if c.pending[i].lastSeq == last {
			c.pending[i].steps--
			break
		}
	}
	n := 0
	for n < len(c.pending) && c.pending[n].steps == 0 {
		n++
	}
	if n > 0 && c.failed == nil {
		db.visibleSeq.Store(uint64(c.pending[n-1].lastSeq))
		c.pending = append(c.pending[:0], c.pending[n:]...)
		c.pubCond.Broadcast()
	}
	return base.SeqNum(db.visibleSeq.Load()) >= last
}

// failCommits records err, a batch's failed insert or sync, as the reason
// no pending batch from it on is ever published, wakes their waiters, and
// stops the DB's writes. It returns the error the batch's writer sees.
func (db *DB) failCommits(err error) error {
	c := &db.commit
	c.pubMu.Lock()
	if c.failed == nil {
		c.failed = err
	}
	c.pubCond.Broadcast()
	c.pubMu.Unlock()
	db.failWrites(err)
	return err
}

// waitVisibleLocked waits until seq is visible, or returns the sync error
// that keeps it from ever being. Called with commit.pubMu held.
func (db *DB) waitVisibleLocked(seq base.SeqNum) error {
	c := &db.commit
	for base.SeqNum(db.visibleSeq.Load()) < seq {
		if c.failed != nil {
			return c.failed
		}
		c.pubCond.Wait()
	}
	return nil
}

// failWrites records err as the DB's sticky write error and returns the
// error writers see from now on.
func (db *DB) failWrites(err error) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.bgErr == nil {
		db.bgErr = err
		db.stopped.Store(true)
	}
	db.cond.Broadcast()
	return db.bgErr
}

// makeRoomForWrite gives b room in the mutable memtable, which it returns,
// rotating it (with a new WAL segment) when full, and stalling while too
// many memtables wait for flush or L0 holds too many tables. Called with
// commit.mu held.
func (db *DB) makeRoomForWrite(b *Batch) (*memTable, error) {
	if b.memSize > maxBatchSize {
		return nil, fmt.Errorf("%w: needs %d bytes of memtable", errBatchTooLarge, b.memSize)
	}
	// The common case takes no DB.mu, which flushes and compactions hold
	// while they install their tables: the mutable memtable is replaced
	// only with commit.mu held, as the caller holds it.
	if mem := db.mem.mutable; !db.closed.Load() && !db.stopped.Load() && mem.reserve(b.memSize) {
		mem.ref() // the insert's, which Enqueue drops
		return mem, nil
	}
	for {
		db.mu.Lock()
		if err := db.writeErrLocked(); err != nil {
			db.mu.Unlock()
			return nil, err
		}
		mem := db.mem.mutable
		if mem.reserve(b.memSize) {
			mem.ref() // the insert's, which Enqueue drops
			db.mu.Unlock()
			return mem, nil
		}
		if mem.unwritten() {
			// A batch larger than a whole memtable gets a memtable of its
			// own size, on the same WAL segment.
			size := max(db.mem.size, int64(b.memSize)+int64(b.memSize)/8+4096)
			db.mem.mutable = db.newMemTable(size, mem.logNum)
			db.pace.Store(db.newPaceLocked())
			db.updateReadState()
			db.mu.Unlock()
			mem.unref()
			continue
		}
		var stallStart time.Time
		for db.memTableStallLocked() || db.l0StallLocked() {
			if stallStart.IsZero() {
				stallStart = time.Now()
				db.metrics.stall.count.Add(1)
				// The queue may be too small for the flush loop to take
				// up on its own (flushCountLocked).
				signal(db.flushSignal)
			}
			db.cond.Wait()
			if err := db.writeErrLocked(); err != nil {
				db.metrics.stall.done(stallStart)
				db.mu.Unlock()
				return nil, err
			}
		}
		if !stallStart.IsZero() {
			db.metrics.stall.done(stallStart)
		}
		newLogNum := db.versions.newFileNum()
		db.mu.Unlock()
		if err := db.rotateMemTable(newLogNum); err != nil {
			return nil, db.failWrites(err)
		}
	}
}

// memTableStallLocked reports whether rotating the mutable memtable would
// leave more than MemTableStopWritesThreshold full memtables' worth of
// arena waiting for flush, so that the writer must wait for a flush first.
// Counting bytes rather than memtables lets the small first memtables of a
// young DB queue without stalling writes on every flush (they rotate every
// few milliseconds); with full-size ones it is the count of memtables. With
// nothing queued there is no flush to wait for, and no stall, however large
// the mutable memtable (a batch larger than a memtable gets one of its
// own).
func (db *DB) memTableStallLocked() bool {
	if len(db.mem.queue) == 0 {
		return false
	}
	queued := int64(db.mem.mutable.Capacity())
	for _, m := range db.mem.queue {
		queued += int64(m.Capacity())
	}
	return queued > int64(db.opts.MemTableStopWritesThreshold)*db.opts.MemTableSize
}

// l0StallLocked reports whether L0 holds too many tables for writes to go
// on. Without background compactions only Compact shrinks L0, and it
// needs the commit lock a stalled writer holds, so writes never stall on
// L0 then: the caller shapes the tree.
func (db *DB) l0StallLocked() bool {
	return !db.opts.DisableBackgroundCompactions &&
		len(db.versions.current.levels[0]) >= db.opts.L0StopWritesThreshold
}

func (db *DB) writeErrLocked() error {
	if db.closed.Load() {
		return ErrClosed
	}
	if db.bgErr != nil {
		return fmt.Errorf("%w: %w", ErrStopped, db.bgErr)
	}
	return nil
}

// rotateMemTable queues the mutable memtable for flush and starts a new one
// on a new WAL segment. Called with commit.mu held.
//
// The old segment is closed (written out and fsynced) in the background,
// and writers go on into the new one meanwhile, whose writer hands its
// file their batches but fsyncs nothing until that close is done
// (wal.WriterOptions.Previous): a synced batch is acknowledged only once
// every older segment is durable. A crash meanwhile may leave the new
// segment holding batches that come after some the old one lost; recovery
// leaves such a segment out (logEnd). Waiting for the close here held
// every writer up for it (several milliseconds at each rotation), and
// writing nothing to the new segment before it held unsynced writers up
// on the WAL's buffer bound while the close's fsync waited for the disk
// (the large fill's slowest writes).
func (db *DB) rotateMemTable(newLogNum uint64) error {
	oldNum, oldFile, oldWriter := db.log.num, db.log.file, db.log.writer
	closed := make(chan error, 1)
	go func() {
		err := oldWriter.Close()
		if cerr := oldFile.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			err = fmt.Errorf("lsm: close WAL %06d: %w", oldNum, err)
		}
		closed <- err
	}()
	previousClosed := sync.OnceValue(func() error { return <-closed })
	nextSize := min(2*db.mem.size, db.opts.MemTableSize)
	f, w, err := db.createLog(newLogNum, base.SeqNum(db.commit.logSeq.Load())+1, nextSize, previousClosed)
	if err != nil {
		if perr := previousClosed(); perr != nil {
			err = errors.Join(err, perr)
		}
		return err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	old := db.mem.mutable
	old.lastSeq = base.SeqNum(db.commit.logSeq.Load())
	old.logClosed = previousClosed
	db.mem.queue = append(db.mem.queue, old)
	db.mem.size = nextSize
	db.mem.mutable = db.newMemTable(db.mem.size, newLogNum)
	db.pace.Store(db.newPaceLocked())
	db.log.num, db.log.file, db.log.writer, db.log.previousClosed = newLogNum, f, w, previousClosed
	db.updateReadState()
	signal(db.flushSignal)
	return nil
}

// walBytesPerSync is how much of a WAL segment its writer lets the kernel
// hold unwritten before starting writeback (wal.WriterOptions.BytesPerSync):
// a rotation closes the old segment with an fsync, which the new
// segment's first byte waits for, and with no synced writes a full
// memtable's segment (64 MiB) took 50-60 ms to fsync at once.
const walBytesPerSync = 2 << 20

// walZeroAhead is how far past a WAL segment's end its synced writes keep
// zeros in the file (wal.WriterOptions.ZeroAhead), so that a segment no
// retired file was left for (a young DB's, or one past the reused file's
// size) is fsynced as cheaply as a reused one: its fsyncs overwrite the
// zeros instead of growing the file, and every 128 KiB of log the
// writer's zeroer writes the next 128 KiB of zeros, past the page cache
// and off the fsyncs' path. A reused file is zeroed ahead too, over the
// older segment's pages, which it drops from the page cache first
// (wal.WriterOptions.Allocated).
const walZeroAhead = 1 << 20

// createLog creates WAL segment num, whose writer reports its fsyncs to
// the metrics and shares the DB's WAL blocks, and writes its first record:
// an empty batch carrying firstSeq, the sequence number its first batch
// will have, so that recovery can tell whether the segment starts where
// the one before it ends, even if no batch of it reached the disk
// (docs/wal.md, "Segments"). The segment's name is made durable before
// its writer fsyncs: at once when previous is nil (a run's first
// segment), else after previous (the older segment's close:
// wal.WriterOptions.Previous), off the writers' path: a directory fsync
// waits for the journal commit that the close's fsync may be in, and held
// every writer up for milliseconds at a rotation. memSize is the arena
// size of the memtable whose writes the segment takes.
func (db *DB) createLog(num uint64, firstSeq base.SeqNum, memSize int64, previous func() error) (vfs.File, *wal.Writer, error) {
	fs, dir := db.fs, db.dir
	name := makeFilename(dir, fileTypeLog, num)
	f, allocated, err := db.newLogFile(name)
	if err != nil {
		return nil, nil, fmt.Errorf("lsm: create WAL: %w", err)
	}
	syncName := func() error {
		if err := vfs.SyncDir(fs, dir); err != nil {
			return fmt.Errorf("lsm: create WAL %s: %w", name, err)
		}
		return nil
	}
	gate := previous
	if previous == nil {
		if err := syncName(); err != nil {
			f.Close()
			return nil, nil, err
		}
	} else {
		gate = func() error {
			if err := previous(); err != nil {
				return err
			}
			return syncName()
		}
	}
	// A segment holds about its memtable's bytes: a young DB's small
	// ones get zeros in proportion.
	zeroAhead := min(walZeroAhead, memSize/4)
	if db.opts.RecycledWALSegments < 0 {
		zeroAhead = 0
	}
	w := wal.NewWriter(f, wal.WriterOptions{OnSync: db.metrics.recordSync, BytesPerSync: walBytesPerSync, Blocks: db.walBlocks, Previous: gate,
		LogNum: num, ZeroAhead: zeroAhead, Allocated: allocated})
	if _, err := w.WriteRecord(segmentHeader(firstSeq)); err != nil {
		w.Close()
		f.Close()
		return nil, nil, fmt.Errorf("lsm: write WAL %s: %w", name, err)
	}
	return f, w, nil
}

// newLogFile opens a new WAL segment's file, name: a retired segment's
// file renamed, written over from its start (logRecycler), or a new one,
// and returns how many bytes the file holds already. A reuse that fails
// leaves the retired file to be deleted.
func (db *DB) newLogFile(name string) (vfs.File, int64, error) {
	if old, ok := db.logs.take(); ok {
		oldName := makeFilename(db.dir, fileTypeLog, old)
		f, err := db.fs.Reuse(oldName, name)
		if err == nil {
			db.metrics.walReused.Add(1)
			var size int64
			if fi, err := f.Stat(); err == nil {
				size = fi.Size()
			}
			return f, size, nil
		}
		db.fs.Remove(oldName)
	}
	f, err := db.fs.Create(name)
	return f, 0, err
}

// segmentHeader returns a WAL segment's first record: an empty batch
// carrying the sequence number of the segment's first batch.
func segmentHeader(firstSeq base.SeqNum) []byte {
	var b Batch
	b.init()
	b.setSeqNum(firstSeq)
	return b.repr
}

// signal wakes a background goroutine without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
