package lsm

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"
	"slices"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/memtable"
	"github.com/tabuladb/tabula/sstable"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
)

// Open opens the DB in dir, creating it (and dir) if missing, and recovers
// every write acknowledged before the last close or crash. A nil opts means
// defaults. Only one DB may have dir open at a time, across processes.
func Open(dir string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	db := &DB{
		dir:           dir,
		opts:          o,
		fs:            o.FS,
		flushSignal:   make(chan struct{}, 1),
		compactSignal: make(chan struct{}, 1),
		cleanSignal:   make(chan struct{}, 1),
		closing:       make(chan struct{}),
		// Free blocks for the largest burst the WAL's buffer bound allows
		// (wal.DefaultMaxBuffered, reached while a rotation's previous
		// segment closes). The blocks live outside the Go heap, so
		// keeping them costs their size and no collector headroom, and a
		// burst finds them mapped and faulted in: with 1 MiB kept, each
		// burst mapped fresh blocks in the writers' path, and the 1M
		// overwrite's p99 rose by a third.
		walBlocks: wal.NewBlockPool(wal.DefaultMaxBuffered),
		logs:      logRecycler{max: o.RecycledWALSegments},
	}
	db.metrics.init()
	db.cond.L = &db.mu
	db.commit.pubCond.L = &db.commit.pubMu
	if err := mkdirAllDurable(db.fs, dir); err != nil {
		return nil, fmt.Errorf("lsm: open %s: %w", dir, err)
	}
	lock, err := db.fs.Lock(makeFilename(dir, fileTypeLock, 0))
	if err != nil {
		return nil, fmt.Errorf("lsm: open %s: %w", dir, err)
	}
	db.dirLock = lock
	if o.CacheSize > 0 {
		db.blockCache = sstable.NewCache(o.CacheSize)
	}
	db.tableCache = newTableCache(dir, db.fs, db.blockCache, o.MaxOpenFiles)
	db.versions = newVersionSet(dir, &db.opts, &db.mu, db.queueObsolete)
	db.versions.lastAssigned = func() base.SeqNum { return base.SeqNum(db.commit.logSeq.Load()) }
	if err := db.recover(); err != nil {
		db.versions.closeManifest()
		db.tableCache.close()
		lock.Close()
		return nil, fmt.Errorf("lsm: open %s: %w", dir, err)
	}
	db.bgWG.Add(3)
	go db.flushLoop()
	go db.compactLoop()
	go db.cleanLoop()
	signal(db.compactSignal)
	return db, nil
}

// mkdirAllDurable creates dir and its missing parents and syncs the parent
// of each directory it creates: a new directory's name, like a new file's,
// survives a crash only once its parent is synced, and with it would go
// every file of a newly created DB.
func mkdirAllDurable(fs vfs.FS, dir string) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		f, err := fs.OpenDir(d)
		if err == nil {
			f.Close()
			break
		}
		if !errors.Is(err, iofs.ErrNotExist) {
			break // let MkdirAll report it, if it is a problem
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := vfs.SyncDir(fs, filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

// recover loads the manifest, replays the WAL segments it does not cover
// into L0 tables, starts a new WAL segment and writes a new manifest.
func (db *DB) recover() error {
	vs := db.versions
	if _, err := vs.load(); err != nil {
		return err
	}
	names, err := db.fs.List(db.dir)
	if err != nil {
		return err
	}
	var logs []uint64
	for _, name := range names {
		ft, num := parseFilename(name)
		if ft == fileTypeLog && num >= vs.logNum {
			logs = append(logs, num)
		}
		// Never reuse the number of a file a crash left behind.
		if ft != fileTypeUnknown && num >= vs.nextFileNum {
			vs.nextFileNum = num + 1
		}
	}
	slices.Sort(logs)
	lastSeq := vs.lastSeq
	edit := &versionEdit{}
	var end logEnd
	for _, num := range logs {
		next, metas, err := db.replayLog(num, end)
		for _, m := range metas {
			edit.added = append(edit.added, newFileEntry{level: 0, meta: m})
		}
		if err != nil {
			db.removeTables(metas)
			return err
		}
		if next.gap {
			// This segment and every newer one hold only writes made after
			// one the crash lost: none of them was acknowledged as synced.
			// They are left out, and deleted with the replayed ones.
			break
		}
		end = next
		lastSeq = max(lastSeq, end.lastSeq)
	}

	// The recovered writes are in tables now; a fresh WAL segment takes new
	// writes, and a fresh manifest records it all.
	logNum := vs.newFileNum()
	f, w, err := db.createLog(logNum, lastSeq+1, db.opts.InitialMemTableSize, nil)
	if err != nil {
		db.removeTables(tablesOf(edit))
		return err
	}
	db.log.num, db.log.file, db.log.writer = logNum, f, w
	nv, err := vs.current.applyEdit(edit)
	if err == nil {
		vs.logNum = logNum
		db.mu.Lock() // which createManifest releases while it writes
		err = vs.createManifest(nv, lastSeq)
		db.mu.Unlock()
	}
	if err != nil {
		if nv != nil {
			nv.unref()
		}
		w.Close()
		f.Close()
		if !errors.Is(err, errEditUncertain) {
			db.removeTables(tablesOf(edit))
		}
		return err
	}
	vs.current.unref()
	vs.setCurrent(nv)
	vs.lastSeq = lastSeq
	db.commit.logSeq.Store(uint64(lastSeq))
	db.visibleSeq.Store(uint64(lastSeq))
	db.mem.size = db.opts.InitialMemTableSize
	db.mem.mutable = db.newMemTable(db.mem.size, logNum)
	db.updateReadState()
	db.deleteUnreferencedFiles(names)
	return nil
}

// logEnd is where the WAL segments replayed so far end. A segment's
// writer hands its file batches while the older segment's closing fsync
// runs (rotateMemTable), so a crash may leave a newer segment holding
// batches that come after some the older one lost: its torn tail, or whole
// records cut at a record boundary, or all of it. Each segment's first
// record names the sequence number it starts at (an empty batch written
// when it is created; in segments written before that, its first batch),
// so the loss shows: a segment that does not start where the replayed
// ones end, or that follows one that holds no record at all, starts after
// a loss (gap), and it and every newer segment are left out. None of their
// batches was acknowledged as synced: a synced batch is only acknowledged
// once every older segment is durable. A torn tail that a newer segment
// continues without a gap is corruption: the torn record held none of the
// log's batches, so the bytes were damaged after they were durable.
type logEnd struct {
	// next is the sequence number the next segment must start at; 0 when
	// nothing was replayed (the first segment's predecessors are in
	// tables).
	next base.SeqNum
	// lastSeq is the sequence number of the last operation replayed, 0
	// before any.
	lastSeq base.SeqNum
	// torn says the newest segment that held a record ended in a torn
	// one; blank, that a segment held no record at all.
	torn, blank bool
	// gap says the segment starts after a loss: nothing of it is
	// replayed.
	gap bool
}

// errContinuesTorn is the corruption of a segment that starts where the
// records before the segment before it ended in a torn tail (logEnd).
var errContinuesTorn = fmt.Errorf("the WAL segment before it ends in a torn record, yet this one starts where the records before that end, so that tail was damaged after it was durable: %w", ErrCorruption)

// begin takes the first record of a segment that follows the ones ending
// at e, whose sequence number is seq: it sets gap if the segment starts
// after a loss, and returns errContinuesTorn if it continues a torn tail.
func (e *logEnd) begin(seq base.SeqNum) error {
	switch {
	case e.blank || e.next != 0 && seq != e.next:
		e.gap = true
	case e.torn:
		return errContinuesTorn
	default:
		e.next, e.torn, e.blank = seq, false, false
	}
	return nil
}

// add takes a batch of the segment, count operations from seq.
func (e *logEnd) add(seq base.SeqNum, count uint32) {
	if count > 0 {
		e.next = seq + base.SeqNum(count)
		e.lastSeq = e.next - 1
	}
}

// finish ends a segment that held records records and ended torn or not.
func (e *logEnd) finish(records int, torn bool) {
	if records == 0 {
		e.blank = true
	} else {
		e.torn = torn
	}
}

func tablesOf(e *versionEdit) []*fileMetadata {
	var out []*fileMetadata
	for _, a := range e.added {
		out = append(out, a.meta)
	}
	return out
}

// replayLog reads WAL segment num into memtables and writes them out as L0
// tables, after the segments that ended at end; it returns where this one
// ends, and replays nothing of a segment that starts after a loss
// (logEnd). A torn record ends a segment cleanly: the crash cut it before
// it was acknowledged.
func (db *DB) replayLog(num uint64, end logEnd) (logEnd, []*fileMetadata, error) {
	name := makeFilename(db.dir, fileTypeLog, num)
	f, err := db.fs.Open(name)
	if err != nil {
		return end, nil, fmt.Errorf("open WAL: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return end, nil, err
	}
	var (
		metas   []*fileMetadata
		mem     = db.newMemTable(db.opts.MemTableSize, num)
		r       = wal.NewRecyclableReader(f, info.Size(), num)
		b       Batch
		records int
	)
	// The memtable in use goes with the replay, however it ends.
	defer func() { mem.unref() }()
	flushMem := func() error {
		if mem.Empty() {
			return nil
		}
		iter := mem.NewIter(nil, nil)
		defer iter.Close()
		// No snapshot survives a restart, so only each key's newest
		// version is kept; tombstones stay, older tables may hold the key.
		ms, err := db.writeTables(newCompactionIter(iter, nil, func([]byte) bool { return false }, db.opts.DropKey), 0, nil, nil)
		metas = append(metas, ms...)
		return err
	}
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			return end, metas, fmt.Errorf("%s: %w", name, err)
		}
		br, err := newBatchReader(rec)
		if err != nil {
			return end, metas, fmt.Errorf("%s: %w", name, err)
		}
		b.repr, b.count, b.memSize = rec, br.count, 0
		// Validate the whole batch and size it before applying any of it.
		for {
			key, value, ok, err := br.next()
			if err != nil {
				return end, metas, fmt.Errorf("%s: %w", name, err)
			}
			if !ok {
				break
			}
			b.memSize += memtable.EntrySize(len(key.UserKey), len(value))
		}
		if records++; records == 1 {
			if err := end.begin(br.seq); err != nil {
				return end, nil, fmt.Errorf("%s (sequence number %d): %w", name, br.seq, err)
			}
			if end.gap {
				return end, nil, nil
			}
		}
		if !mem.reserve(b.memSize) {
			if err := flushMem(); err != nil {
				return end, metas, err
			}
			mem.unref()
			mem = db.newMemTable(max(db.opts.MemTableSize, int64(b.memSize)+4096), num)
			mem.reserve(b.memSize) // sized for it: cannot fail
		}
		if err := mem.insert(&b); err != nil {
			return end, metas, fmt.Errorf("%s: %w", name, err)
		}
		end.add(br.seq, br.count)
	}
	torn, _ := r.TornTail()
	end.finish(records, torn)
	if err := flushMem(); err != nil {
		return end, metas, err
	}
	return end, metas, nil
}

// deleteUnreferencedFiles removes, at open, what earlier runs left behind:
// tables not in the current version, WAL segments below the log number,
// old manifests and temporary files.
func (db *DB) deleteUnreferencedFiles(names []string) {
	live := map[uint64]bool{}
	db.versions.addLiveFiles(live)
	for _, name := range names {
		ft, num := parseFilename(name)
		var obsolete bool
		switch ft {
		case fileTypeTable:
			obsolete = !live[num]
		case fileTypeLog:
			obsolete = num < db.versions.logNum
		case fileTypeManifest:
			obsolete = num != db.versions.manifestNum
		case fileTypeTemp:
			obsolete = true
		}
		if obsolete {
			db.fs.Remove(makeFilename(db.dir, ft, num))
		}
	}
}

// queueObsolete takes tables no version references any more; the clean
// loop deletes their files.
func (db *DB) queueObsolete(tables []*fileMetadata) {
	db.obsolete.mu.Lock()
	db.obsolete.tables = append(db.obsolete.tables, tables...)
	db.obsolete.mu.Unlock()
	signal(db.cleanSignal)
}

func (db *DB) cleanLoop() {
	defer db.bgWG.Done()
	for {
		select {
		case <-db.closing:
			return
		case <-db.cleanSignal:
			db.deleteObsoleteTables()
		}
	}
}

func (db *DB) deleteObsoleteTables() {
	db.obsolete.mu.Lock()
	tables := db.obsolete.tables
	db.obsolete.tables = nil
	db.obsolete.mu.Unlock()
	for _, t := range tables {
		db.tableCache.evict(t.fileNum)
		db.fs.Remove(makeFilename(db.dir, fileTypeTable, t.fileNum))
	}
}

// Close waits for in-flight writes, stops background work, and closes the
// DB. Writes stalled waiting for a flush or compaction fail with
// ErrClosed. Writes not yet flushed stay in the WAL and are recovered by
// the next Open. Iterators and snapshots should be closed first.
func (db *DB) Close() error {
	// Refuse new work first, and wake stalled writers: they hold the commit
	// lock taken next.
	db.mu.Lock()
	if db.closed.Load() {
		db.mu.Unlock()
		return ErrClosed
	}
	db.closed.Store(true)
	db.cond.Broadcast()
	db.mu.Unlock()

	db.commit.mu.Lock()
	db.mu.Lock()
	close(db.closing)
	db.cond.Broadcast()
	db.mu.Unlock()
	db.commit.mu.Unlock()
	db.commit.pubMu.Lock()
	db.commit.pubCond.Broadcast()
	db.commit.pubMu.Unlock()

	db.bgWG.Wait()

	db.mu.Lock()
	err := db.bgErr
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	if werr := db.log.writer.Close(); err == nil && werr != nil {
		err = fmt.Errorf("lsm: close WAL: %w", werr)
	}
	if cerr := db.log.file.Close(); err == nil && cerr != nil {
		err = cerr
	}
	// A manual Compact may still be logging its edit; none is logged after.
	for db.versions.logging {
		db.versions.logged.Wait()
	}
	db.versions.closed = true
	if merr := db.versions.closeManifest(); err == nil && merr != nil {
		err = merr
	}
	// Drop the DB's references to the memtables, so that their arenas are
	// released now, or by the last iterator still open.
	db.mem.mutable.unref()
	for _, m := range db.mem.queue {
		m.unref()
	}
	db.readState.mu.Lock()
	rs := db.readState.val
	db.readState.val = nil
	db.readState.mu.Unlock()
	rs.unref()
	db.mu.Unlock()
	db.logs.drain(db.fs, db.dir)
	db.deleteObsoleteTables()
	db.tableCache.close()
	if db.blockCache != nil {
		// Blocks held by iterators still open are freed as they close.
		db.blockCache.Close()
	}
	if lerr := db.dirLock.Close(); err == nil && lerr != nil {
		err = lerr
	}
	return err
}
