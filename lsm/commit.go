package lsm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
)

// commitPipeline orders writes. A batch goes through three steps:
//
//  1. Under mu: take the next sequence numbers, append the batch to the WAL
//     (a copy into the log writer's buffer, no I/O wait) and insert it into
//     the mutable memtable. The memtable has a single writer, so inserting
//     under mu is what keeps it consistent, and it keeps WAL order equal
//     to sequence order.
//  2. Outside mu, synced batches wait for the WAL to be fsynced past their
//     record. The log writer batches the waiters of many batches into one
//     fsync: while one fsync runs, the next batches queue behind it.
//  3. Publish: the visible sequence number advances over the prefix of
//     pending batches that are done. A batch is visible only once it and
//     every batch before it are in the memtable and, when synced, on disk,
//     so readers never see a write a crash could take back from a synced
//     writer, and never part of a batch.
//
// An unsynced batch with nothing pending before it publishes itself inside
// step 1: the common no-sync path touches no other goroutine.
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
	done    bool
}

// Apply writes the batch atomically: after it returns nil, every
// operation in it is visible to new reads and, unless wo says otherwise,
// durable. The batch may be reused after Apply returns.
func (db *DB) Apply(b *Batch, wo *WriteOptions) error {
	if b.err != nil {
		return b.err
	}
	if b.empty() {
		return nil
	}
	sync := wo == nil || wo.Sync
	c := &db.commit

	c.mu.Lock()
	if err := db.makeRoomForWrite(b); err != nil {
		c.mu.Unlock()
		return err
	}
	first := base.SeqNum(c.logSeq.Load()) + 1
	last := first + base.SeqNum(b.count) - 1
	b.setSeqNum(first)
	w := db.log.writer
	end, err := w.WriteRecord(b.repr)
	if err != nil {
		err = db.failWrites(fmt.Errorf("lsm: write WAL %06d: %w", db.log.num, err))
		c.mu.Unlock()
		return err
	}
	c.logSeq.Store(uint64(last))
	if err := db.applyToMemTable(b, db.mem.mutable); err != nil {
		// The memtable had room (checked above), so this is a malformed
		// batch that got past Set/Delete: nothing sane can follow.
		err = db.failWrites(err)
		c.mu.Unlock()
		return err
	}
	db.metrics.walBytesWritten.Add(int64(len(b.repr)))

	c.pubMu.Lock()
	if !sync && len(c.pending) == 0 && c.failed == nil {
		db.visibleSeq.Store(uint64(last))
		c.pubMu.Unlock()
		c.mu.Unlock()
		return nil
	}
	c.pending = append(c.pending, pendingBatch{lastSeq: last, done: !sync})
	c.pubMu.Unlock()
	c.mu.Unlock()

	if sync {
		if err := w.SyncTo(end); err != nil {
			err = fmt.Errorf("lsm: sync WAL: %w", err)
			c.pubMu.Lock()
			if c.failed == nil {
				c.failed = err
			}
			c.pubCond.Broadcast()
			c.pubMu.Unlock()
			db.failWrites(err)
			return err
		}
	}
	return db.publish(last)
}

// publish marks the batch ending at last done, advances the visible
// sequence number over the done prefix of pending batches, and waits until
// last is visible.
func (db *DB) publish(last base.SeqNum) error {
	c := &db.commit
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	for i := range c.pending {
		if c.pending[i].lastSeq == last {
			c.pending[i].done = true
			break
		}
	}
	n := 0
	for n < len(c.pending) && c.pending[n].done {
		n++
	}
	if n > 0 && c.failed == nil {
		db.visibleSeq.Store(uint64(c.pending[n-1].lastSeq))
		c.pending = append(c.pending[:0], c.pending[n:]...)
		c.pubCond.Broadcast()
	}
	for base.SeqNum(db.visibleSeq.Load()) < last {
		if c.failed != nil {
			return c.failed
		}
		c.pubCond.Wait()
	}
	return nil
}

func (db *DB) applyToMemTable(b *Batch, m *memTable) error {
	r, err := newBatchReader(b.repr)
	if err != nil {
		return err
	}
	for {
		key, value, ok, err := r.next()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := m.Add(key, value); err != nil {
			return fmt.Errorf("lsm: memtable insert: %w", err)
		}
	}
}

// failWrites records err as the DB's sticky write error and returns the
// error writers see from now on. Called with commit.mu held.
func (db *DB) failWrites(err error) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.bgErr == nil {
		db.bgErr = err
	}
	db.cond.Broadcast()
	return db.bgErr
}

// makeRoomForWrite ensures the mutable memtable can take b, rotating it
// (with a new WAL segment) when full, and stalling while too many memtables
// wait for flush or L0 holds too many tables. Called with commit.mu held.
func (db *DB) makeRoomForWrite(b *Batch) error {
	if b.memSize > maxBatchSize {
		return fmt.Errorf("%w: needs %d bytes of memtable", errBatchTooLarge, b.memSize)
	}
	for {
		db.mu.Lock()
		if err := db.writeErrLocked(); err != nil {
			db.mu.Unlock()
			return err
		}
		mem := db.mem.mutable
		if b.memSize <= mem.Available() {
			db.mu.Unlock()
			return nil
		}
		if mem.Empty() {
			// A batch larger than a whole memtable gets a memtable of its
			// own size, on the same WAL segment.
			size := max(db.opts.MemTableSize, int64(b.memSize)+int64(b.memSize)/8+4096)
			db.mem.mutable = newMemTable(size, mem.logNum)
			db.updateReadState()
			db.mu.Unlock()
			continue
		}
		var stallStart time.Time
		for len(db.mem.queue) >= db.opts.MemTableStopWritesThreshold || db.l0StallLocked() {
			if stallStart.IsZero() {
				stallStart = time.Now()
				db.metrics.stallCount.Add(1)
			}
			db.cond.Wait()
			if err := db.writeErrLocked(); err != nil {
				db.metrics.stallNanos.Add(int64(time.Since(stallStart)))
				db.mu.Unlock()
				return err
			}
		}
		if !stallStart.IsZero() {
			db.metrics.stallNanos.Add(int64(time.Since(stallStart)))
		}
		newLogNum := db.versions.newFileNum()
		db.mu.Unlock()
		if err := db.rotateMemTable(newLogNum); err != nil {
			return db.failWrites(err)
		}
	}
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
func (db *DB) rotateMemTable(newLogNum uint64) error {
	// Finish the old segment before the new one gets a record: recovery
	// may then treat a torn record as the end of the log only in the last
	// segment, and a newer synced batch can never survive an older lost one.
	if err := db.log.writer.Close(); err != nil {
		return fmt.Errorf("lsm: close WAL %06d: %w", db.log.num, err)
	}
	if err := db.log.file.Close(); err != nil {
		return fmt.Errorf("lsm: close WAL %06d: %w", db.log.num, err)
	}
	f, w, err := createLog(db.fs, db.dir, newLogNum)
	if err != nil {
		return err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	old := db.mem.mutable
	old.lastSeq = base.SeqNum(db.commit.logSeq.Load())
	db.mem.queue = append(db.mem.queue, old)
	db.mem.mutable = newMemTable(db.opts.MemTableSize, newLogNum)
	db.log.num, db.log.file, db.log.writer = newLogNum, f, w
	db.updateReadState()
	signal(db.flushSignal)
	return nil
}

// createLog creates WAL segment num and makes its name durable.
func createLog(fs vfs.FS, dir string, num uint64) (vfs.File, *wal.Writer, error) {
	name := makeFilename(dir, fileTypeLog, num)
	f, err := fs.Create(name)
	if err != nil {
		return nil, nil, fmt.Errorf("lsm: create WAL: %w", err)
	}
	if err := vfs.SyncDir(fs, dir); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("lsm: create WAL %s: %w", name, err)
	}
	return f, wal.NewWriter(f, wal.WriterOptions{}), nil
}

// signal wakes a background goroutine without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
