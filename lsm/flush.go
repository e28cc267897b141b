package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/sstable"
	"github.com/tabuladb/tabula/vfs"
)

// Flush writes every memtable to L0 and returns once the tables and the
// manifest edit are durable.
func (db *DB) Flush() error {
	db.commit.mu.Lock()
	db.mu.Lock()
	if err := db.writeErrLocked(); err != nil {
		db.mu.Unlock()
		db.commit.mu.Unlock()
		return err
	}
	var target *memTable
	// walClosed waits for the close of the WAL segment the rotation ended
	// (in the background), whose failure Flush reports too.
	var walClosed func() error
	if !db.mem.mutable.unwritten() {
		target = db.mem.mutable
		newLogNum := db.versions.newFileNum()
		db.mu.Unlock()
		if err := db.rotateMemTable(newLogNum); err != nil {
			db.commit.mu.Unlock()
			return db.failWrites(err)
		}
		walClosed = db.log.previousClosed
		db.mu.Lock()
	} else if n := len(db.mem.queue); n > 0 {
		target = db.mem.queue[n-1]
	}
	db.commit.mu.Unlock()
	err := db.waitFlushedLocked(target)
	db.mu.Unlock()
	if err != nil {
		return err
	}
	return db.awaitLogClose(walClosed)
}

// awaitLogClose waits for the background close of a WAL segment (nil:
// none), as given by db.log.previousClosed, and stops writes if it
// failed.
func (db *DB) awaitLogClose(closed func() error) error {
	if closed == nil {
		return nil
	}
	if err := closed(); err != nil {
		return db.failWrites(err)
	}
	return nil
}

// waitFlushedLocked waits until memtable target (nil: none) is flushed.
// Called with db.mu held.
func (db *DB) waitFlushedLocked(target *memTable) error {
	db.mem.flushWaiters++
	defer func() { db.mem.flushWaiters-- }()
	for target != nil && slices.Contains(db.mem.queue, target) {
		if db.closed.Load() {
			return ErrClosed
		}
		if db.bgErr != nil {
			return db.bgErr // this flush's failure, or one it waited behind
		}
		signal(db.flushSignal)
		db.cond.Wait()
	}
	return db.writeErrLocked()
}

func (db *DB) flushLoop() {
	defer db.bgWG.Done()
	for {
		select {
		case <-db.closing:
			return
		case <-db.flushSignal:
		}
		for db.flushOne() {
		}
	}
}

// flushOne writes the oldest queued memtables to L0: one, or as many
// small ones as it takes (flushCountLocked). It returns false when there
// was nothing to do or the flush failed.
func (db *DB) flushOne() bool {
	db.mu.Lock()
	n := db.flushCountLocked()
	if n == 0 || db.bgErr != nil {
		db.mu.Unlock()
		return false
	}
	mems := slices.Clone(db.mem.queue[:n])
	db.mu.Unlock()

	// Every write in the memtables must be visible before it reaches a
	// table: compactions treat table contents as seen by current readers.
	if !db.waitVisible(mems[n-1].lastSeq) {
		return false
	}
	start := time.Now()
	db.mu.Lock()
	snapshots := db.compactionSnapshots()
	v := db.versions.current
	v.ref()
	db.mu.Unlock()

	iters := make([]base.InternalIterator, n)
	for i, m := range mems {
		m.flushStart.Store(start.UnixNano())
		iters[i] = &progressIter{InternalIterator: m.NewIter(nil, nil), m: m}
	}
	iter := iters[0]
	if n > 1 {
		iter = newMergingIter(iters)
	}
	metas, err := db.writeTables(newCompactionIter(iter, snapshots, baseLevelChecker(v, 0), db.opts.DropKey), 0, nil, db.roomToSpare)
	if cerr := iter.Close(); err == nil {
		err = cerr
	}
	v.unref()

	if !db.installFlush(mems, metas, err, start) {
		return false
	}
	// The DB's references, dropped outside mu: the last unref unmaps an
	// arena, which takes a while for a large one. Readers still holding
	// one keep it until they are done.
	for _, m := range mems {
		m.unref()
	}
	return true
}

// flushCountLocked says how many of the oldest queued memtables the next
// flush writes: the fewest that add up to minFlushBytes. A young DB's
// small memtables (InitialMemTableSize, doubling) so wait to be flushed
// together, as in Pebble: a flush costs a table, a manifest edit and their
// fsyncs whatever its size, every few milliseconds for the first small
// memtables, and synced writes waited behind those fsyncs. With
// full-size memtables it is one. Less than that is flushed too, all of
// it, once a Flush waits for it or writers stall (a batch's own, larger
// memtable may stall them behind small queued ones). Called with db.mu
// held.
func (db *DB) flushCountLocked() int {
	var queued int64
	least := db.minFlushBytes()
	for i, m := range db.mem.queue {
		queued += int64(m.Capacity())
		if queued >= least {
			return i + 1
		}
	}
	if db.mem.flushWaiters > 0 || db.memTableStallLocked() {
		return len(db.mem.queue)
	}
	return 0
}

// minFlushBytes is how much memtable a flush waits for (flushCountLocked):
// half a full memtable, as in Pebble, but at most 4 MiB. Pebble's half
// (32 MiB by default) made the first flush of a fill carry the first
// eight memtables, 64 MiB, while the next full one filled; the fill's
// peak RSS and its longest writes grew (an A/B run at N = 1M: fillrandom
// 150-156 MiB against 141-144, fillseq's longest writes 44-66 ms against
// 12-17). 4 MiB still spares a young DB the flushes of its first four
// memtables (3.75 MiB).
func (db *DB) minFlushBytes() int64 {
	return min(db.opts.MemTableSize/2, 4<<20)
}

// installFlush logs the tables a flush of mems (the oldest queued
// memtables) wrote, or records err, the flush's failure, and takes mems
// off the queue. It reports whether it did.
func (db *DB) installFlush(mems []*memTable, metas []*fileMetadata, err error, start time.Time) bool {
	db.mu.Lock()
	n := len(mems)
	edit := &versionEdit{logNum: db.mem.mutable.logNum}
	if len(db.mem.queue) > n {
		edit.logNum = db.mem.queue[n].logNum
	}
	for _, meta := range metas {
		edit.added = append(edit.added, newFileEntry{level: 0, meta: meta})
	}
	if err == nil {
		err = db.versions.logAndApply(edit)
	}
	if err != nil {
		if !errors.Is(err, errEditUncertain) {
			db.removeTables(metas)
		}
		db.setBGErr(fmt.Errorf("lsm: flush: %w", err))
		db.mu.Unlock()
		return false
	}
	db.mem.queue = db.mem.queue[n:]
	db.recordFlushTail(mems, start, time.Now())
	for _, m := range mems {
		m.flushed.Store(math.MaxInt64)
	}
	db.dropDrainedPaceLocked()
	db.updateReadState()
	db.metrics.flushCount.Add(1)
	db.metrics.flushNanos.Add(int64(time.Since(start)))
	for _, meta := range metas {
		db.metrics.flushBytes.Add(int64(meta.size))
	}
	db.cond.Broadcast()
	signal(db.compactSignal)
	db.mu.Unlock()
	// The segment is kept for reuse, or deleted, without db.mu, which a
	// writer rotating the memtable needs: an unlink may wait for the
	// filesystem's journal, behind a compaction's fsync (a watched 20M
	// fill caught a write waiting 40 ms so). Nothing needs the segment
	// now but a checkpoint copying it (logRecycler).
	for _, m := range mems {
		if m.logNum < edit.logNum && !db.retireLog(m) {
			db.fs.Remove(makeFilename(db.dir, fileTypeLog, m.logNum))
		}
	}
	return true
}

// retireLog offers the WAL segment of m, whose flush is durable, for
// reuse, once its close is done, and reports whether it was taken. With
// no room for it (reuse off, or enough kept), it does not wait for the
// close: a deletion needs none.
func (db *DB) retireLog(m *memTable) bool {
	if m.logClosed == nil || !db.logs.room() || m.logClosed() != nil {
		return false
	}
	return db.logs.retire(m.logNum)
}

// waitVisible waits until seq is visible. It returns false if a failed
// write means it never will be.
func (db *DB) waitVisible(seq base.SeqNum) bool {
	c := &db.commit
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	for base.SeqNum(db.visibleSeq.Load()) < seq {
		if c.failed != nil {
			return false
		}
		c.pubCond.Wait()
	}
	return true
}

// setBGErr records a background failure. Called with db.mu held.
func (db *DB) setBGErr(err error) {
	if db.bgErr == nil {
		db.bgErr = err
		db.stopped.Store(true)
	}
	db.cond.Broadcast()
}

// compactionSnapshots returns the sequence numbers that cut key histories
// into stripes: live snapshots ascending, then the visible sequence number.
// Called with db.mu held.
func (db *DB) compactionSnapshots() []base.SeqNum {
	s := db.snapshots.seqNums()
	return append(s, base.SeqNum(db.visibleSeq.Load()))
}

// tableWriterLimits says where writeTables cuts its output besides the
// target size.
type tableWriterLimits struct {
	// grandparents are the tables two levels below the output; an output
	// table is also cut once it overlaps more than maxGrandparentBytes of
	// them, to bound the cost of compacting it later.
	grandparents        []*fileMetadata
	maxGrandparentBytes int64
}

// yieldEntries is how many entries a flush or compaction writes between
// two yields of its goroutine. Table writing is CPU work (merging,
// compressing) that Go preempts only every 10 ms; on a machine with as
// many busy background goroutines as cores, a foreground writer made
// runnable behind them, or the WAL flusher it waits on, waited for those
// slices. Yielding every few hundred entries (well under a millisecond
// of work) lets them in sooner: in a 20-million-key fill on two cores,
// writes slower than 15 ms fell from 72 and 73 to 18 and 23 (two runs
// each), and the fill took 103-106 s instead of 110-112. The longest
// writes (over 25 ms either way) are not these: dumps taken during them
// show the writer runnable while the flush and a compaction hold both
// cores (or, before a new WAL segment took writes during the old one's
// closing fsync, waiting on the WAL's buffer bound).
// A flush that yields keeps its immutable memtable longer, and if the
// mutable one fills meanwhile, a third arena fills too: the fill's peak
// RSS rose by about 20 MiB (480 MiB against 458 with yields in
// compactions only, which brought the slow writes back to 74). So a
// flush yields only while the mutable memtable has room to spare
// (roomToSpare).
const yieldEntries = 256

// roomToSpare reports whether the mutable memtable is less than half
// full: a flush that finishes before it fills has time to yield.
func (db *DB) roomToSpare() bool {
	db.mu.Lock()
	m := db.mem.mutable
	db.mu.Unlock()
	return m.reserved.Load() < int64(m.Capacity())/2
}

// writeTables writes the entries ci keeps into new tables of about
// targetSize bytes (0: a single table), each synced, and
// syncs the directory. It never splits one user key's versions between two
// tables, so tables of one level never share a user key. On error it
// removes what it wrote. Every yieldEntries entries it yields, if mayYield
// (nil: always) says it may.
func (db *DB) writeTables(ci *compactionIter, targetSize int64, lim *tableWriterLimits, mayYield func() bool) ([]*fileMetadata, error) {
	var (
		metas    []*fileMetadata
		out      *tableOutput
		lastKey  []byte
		gpIndex  int
		gpBytes  int64
		entries  int
		cutAtKey bool // finish the current table at the next user key
	)
	fail := func(err error) ([]*fileMetadata, error) {
		if out != nil {
			out.abort()
		}
		db.mu.Lock()
		db.removeTables(metas)
		db.mu.Unlock()
		return nil, err
	}
	for {
		key, value, ok := ci.next()
		if !ok {
			break
		}
		if entries++; entries%yieldEntries == 0 {
			select {
			case <-db.closing:
				return fail(ErrClosed)
			default:
			}
			if mayYield == nil || mayYield() {
				runtime.Gosched()
			}
		}
		newUserKey := lastKey == nil || !bytes.Equal(key.UserKey, lastKey)
		if lim != nil && newUserKey {
			for gpIndex < len(lim.grandparents) && bytes.Compare(lim.grandparents[gpIndex].largest.UserKey, key.UserKey) < 0 {
				gpBytes += int64(lim.grandparents[gpIndex].size)
				gpIndex++
			}
			if out != nil && gpBytes > lim.maxGrandparentBytes {
				cutAtKey = true
			}
		}
		if out != nil && newUserKey && (cutAtKey || (targetSize > 0 && int64(out.w.EstimatedSize()) >= targetSize)) {
			meta, err := out.finish()
			if err != nil {
				out = nil
				return fail(err)
			}
			metas = append(metas, meta)
			out, cutAtKey, gpBytes = nil, false, 0
		}
		if out == nil {
			var err error
			if out, err = db.newTableOutput(); err != nil {
				return fail(err)
			}
		}
		if err := out.w.Add(key, value); err != nil {
			return fail(fmt.Errorf("lsm: table %06d: %w", out.fileNum, err))
		}
		lastKey = append(lastKey[:0], key.UserKey...)
	}
	if err := ci.iter.Error(); err != nil {
		return fail(err)
	}
	if out != nil {
		meta, err := out.finish()
		if err != nil {
			out = nil
			return fail(err)
		}
		metas = append(metas, meta)
	}
	if len(metas) > 0 {
		if err := vfs.SyncDir(db.fs, db.dir); err != nil {
			return fail(fmt.Errorf("lsm: sync directory: %w", err))
		}
	}
	return metas, nil
}

// tableOutput is a table being written.
type tableOutput struct {
	db      *DB
	fileNum uint64
	file    vfs.File
	w       *sstable.Writer
	scratch *sstable.Scratch // the writer's, from db.tableScratch
}

func (db *DB) newTableOutput() (*tableOutput, error) {
	db.mu.Lock()
	fileNum := db.versions.newFileNum()
	db.mu.Unlock()
	f, err := db.fs.Create(makeFilename(db.dir, fileTypeTable, fileNum))
	if err != nil {
		return nil, fmt.Errorf("lsm: create table: %w", err)
	}
	wo := db.opts.writerOptions()
	sc := db.tableScratch.get()
	wo.Scratch = sc
	return &tableOutput{db: db, fileNum: fileNum, file: f, w: sstable.NewWriter(&writebackWriter{f: f, start: vfs.StartWriteback}, wo), scratch: sc}, nil
}

// tableBytesPerSync is how much of a table its writer lets the kernel
// hold unwritten before starting writeback (vfs.StartWriteback), as
// Pebble's BytesPerSync (512 KiB) and RocksDB's bytes_per_sync do. A
// table written whole into the page cache and then fsynced held its
// flush up for the whole write at the end (tens of MiB), and every WAL
// fsync behind it.
const tableBytesPerSync = 1 << 20

// writebackWriter writes a table to its file and starts the kernel's
// writeback of every tableBytesPerSync bytes written, with start
// (vfs.StartWriteback).
type writebackWriter struct {
	f                vfs.File
	start            func(f any, off, n int64) bool
	written, started int64
	off              bool // start failed: a test filesystem's file
}

func (w *writebackWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.written += int64(n)
	if !w.off && w.written-w.started >= tableBytesPerSync {
		w.off = !w.start(w.f, w.started, w.written-w.started)
		w.started = w.written
	}
	return n, err
}

// releaseScratch lends the writer's memory to the next table, once the
// writer is done with it. Later calls do nothing (a failed directory sync
// aborts an output already finished).
func (o *tableOutput) releaseScratch() {
	if o.scratch != nil {
		o.db.tableScratch.put(o.scratch)
		o.scratch = nil
	}
}

// scratchList keeps the sstable writers' memory between tables: one
// Scratch per table being written at once, each holding a writer's
// buffers (sstable.Scratch). A sync.Pool would not do: the collector
// empties it, and the buffers, grown again by doubling for every table,
// were most of a compaction's garbage.
type scratchList struct {
	mu   sync.Mutex
	free []*sstable.Scratch
}

// maxFreeScratch bounds the Scratches kept to the tables a DB writes at
// once: one by the flush goroutine, one by a compaction (automatic or
// manual: one runs at a time). What they hold is what those two writers
// held at their peak anyway.
const maxFreeScratch = 2

func (l *scratchList) get() *sstable.Scratch {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		sc := l.free[n-1]
		l.free = l.free[:n-1]
		return sc
	}
	return new(sstable.Scratch)
}

func (l *scratchList) put(sc *sstable.Scratch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) < maxFreeScratch {
		l.free = append(l.free, sc)
	}
}

// finish completes the table, syncs and closes it.
func (o *tableOutput) finish() (*fileMetadata, error) {
	err := o.w.Close()
	o.releaseScratch()
	if err == nil {
		err = o.file.Sync()
	}
	if cerr := o.file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		o.db.fs.Remove(makeFilename(o.db.dir, fileTypeTable, o.fileNum))
		return nil, fmt.Errorf("lsm: write table %06d: %w", o.fileNum, err)
	}
	md := o.w.Metadata()
	return &fileMetadata{
		fileNum:     o.fileNum,
		size:        md.Size,
		smallest:    md.Smallest,
		largest:     md.Largest,
		smallestSeq: md.SmallestSeq,
		largestSeq:  md.LargestSeq,
	}, nil
}

func (o *tableOutput) abort() {
	o.releaseScratch()
	o.file.Close()
	o.db.fs.Remove(makeFilename(o.db.dir, fileTypeTable, o.fileNum))
}

// removeTables deletes tables that were written but never installed.
// Called with db.mu held or before they were shared.
func (db *DB) removeTables(metas []*fileMetadata) {
	for _, m := range metas {
		db.fs.Remove(makeFilename(db.dir, fileTypeTable, m.fileNum))
	}
}
