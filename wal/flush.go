package wal

import (
	"fmt"
	"io"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// flushLoop is the background goroutine. Each round takes everything
// appended so far, writes it without holding the lock (so WriteRecord
// keeps appending meanwhile), and fsyncs if anyone waits for durability;
// records that arrive during an fsync are all covered by the next one.
func (w *Writer) flushLoop() {
	defer close(w.done)
	defer func() {
		if w.zeros != nil {
			w.zeros.stop()
		}
	}()
	var batch []*block
	// writtenBack is the offset up to which the file was fsynced or its
	// writeback started.
	var writtenBack int64
	if w.dropOlder && dropCache(w.f, w.zeroedTo) {
		w.uncached, w.zeroedTo = w.zeroedTo, 0
	}
	for {
		select {
		case <-w.wake:
		case <-w.quit:
			return
		}
		w.mu.Lock()
		for w.err == nil {
			if w.syncReq > w.synced {
				w.gatherLocked()
			}
			w.pending = false
			batch, w.full = w.full, batch[:0]
			cur := w.cur
			from, to := cur.written, cur.n
			start, target := w.flushed, w.logical
			doSync := w.syncReq > w.synced
			// Once Close has been called nothing is appended any more:
			// zeros ahead would be written, and synced, for no write.
			zeros := doSync && w.zeroAhead > 0 && !w.closing
			writtenBack = max(writtenBack, w.synced)
			writeBack := !doSync && w.bytesPerSync > 0 && target-writtenBack >= w.bytesPerSync
			if len(batch) == 0 && from == to && !doSync && !writeBack {
				break
			}
			// Every SyncTo caller that joined since the last round asked
			// for an offset at most target, so this fsync serves them all.
			group := w.joined
			w.joined = 0
			w.mu.Unlock()

			w.clearForLog(target)
			w.zeroLastPage(target)
			err := w.writeOut(batch, cur, from, to, start)
			if err == nil && zeros {
				w.refillZeros(target)
			}
			if err == nil && writeBack {
				if !vfs.StartWriteback(w.f, writtenBack, target-writtenBack) {
					doSync = true
				}
				writtenBack = target
			}
			if err == nil && doSync {
				// What this fsync makes durable counts only once every
				// older segment is.
				err = w.previousDurable()
			}
			var syncTime time.Duration
			if err == nil && doSync {
				t0 := time.Now()
				if serr := w.sync(); serr != nil {
					err = fmt.Errorf("wal: fsync up to offset %d: %w", target, serr)
				}
				syncTime = time.Since(t0)
				if err == nil && w.onSync != nil {
					w.onSync(syncTime, group)
				}
			}

			w.mu.Lock()
			if err != nil {
				w.err = err
				w.cond.Broadcast()
				break
			}
			cur.written = to
			for i, b := range batch {
				w.blocks.put(b)
				batch[i] = nil
			}
			batch = batch[:0]
			w.flushed = target
			if doSync {
				w.synced = target
				w.lastSync = syncTime
				w.expect = w.waiting
			}
			w.cond.Broadcast()
		}
		w.mu.Unlock()
	}
}

// zeroLastPage zeroes the page that a write ending at end ends inside,
// when the page is one the file holds on disk only (uncached: the reused
// file's dropped from the cache, or the zeroer's) and the cache holds
// nothing of yet: the kernel would read such a page from the disk to
// write part of it. Pages the write covers whole need nothing, and it
// starts at or before zeroedTo, or inside the first page. The first page
// is read instead: zeroed and then torn from the log's first bytes by a
// crash, it would begin with no chunk, which a reader takes for an older
// format and scans the older log's bytes for. Every page the write
// reaches is the cache's afterwards, zeroed or not: zeroedTo moves past
// it, so that no later write zeroes a page holding the log's bytes once
// the zeroer's zeros have passed it.
func (w *Writer) zeroLastPage(end int64) {
	last := end &^ (pageSize - 1)
	if end > w.zeroedTo && last < w.uncached && last > 0 && last < end && !zeroFill(w.f, last, pageSize) {
		w.uncached = 0 // the kernel reads what it must
	}
	w.zeroedTo = max(w.zeroedTo, alignPage(end))
}

// pageSize is the page cache's unit: zeroFill's writes are a page each,
// at page boundaries.
const pageSize = 4096

// alignPage rounds off up to a page boundary.
func alignPage(off int64) int64 { return (off + pageSize - 1) &^ (pageSize - 1) }

// gatherLocked holds an fsync back briefly so that committers released by
// the previous fsync can join it. Without this, when an fsync finishes the
// next starts at once with only the records that arrived while it ran;
// the committers it just released append during the new fsync and wait
// for the one after, so they split into groups that alternate and each
// fsync covers a fraction of them. The flusher waits until as many
// committers have asked for a sync as were in SyncTo when the last fsync
// finished, or for half an fsync's duration, whichever comes first. A
// single committer never waits (it is all that is expected), and when
// concurrency drops the expectation is corrected after one fsync.
func (w *Writer) gatherLocked() {
	if w.joined >= w.expect || w.closing {
		return
	}
	d := min(w.lastSync/2, maxGatherDelay)
	if d <= 0 {
		return
	}
	w.timer.Reset(d)
	defer w.timer.Stop()
	w.gathering = true
	defer func() { w.gathering = false }()
	for w.joined < w.expect && !w.closing {
		w.mu.Unlock()
		select {
		case <-w.arrived:
			w.mu.Lock()
		case <-w.timer.C:
			w.mu.Lock()
			return
		}
	}
}

// writeOut hands the unwritten parts of the filled blocks in batch, then
// cur[from:to], to the file. start is the file offset of the first byte.
func (w *Writer) writeOut(batch []*block, cur *block, from, to int, start int64) error {
	off := start
	write := func(p []byte) error {
		n, err := w.f.Write(p)
		if err == nil && n < len(p) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return fmt.Errorf("wal: write %d bytes at offset %d: %w", len(p), off+int64(n), err)
		}
		off += int64(n)
		return nil
	}
	for _, b := range batch {
		if b.written < BlockSize {
			if err := write(b.buf[b.written:]); err != nil {
				return err
			}
		}
	}
	if from < to {
		return write(cur.buf[from:to])
	}
	return nil
}
