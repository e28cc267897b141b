package wal

import (
	"sync"
	"sync/atomic"

	"github.com/tabuladb/tabula/internal/manual"
	"github.com/tabuladb/tabula/vfs"
)

// Zeros ahead, written off the writers' fsyncs.
//
// A round that refilled the zeros past the log's end (WriterOptions.
// ZeroAhead) wrote them into the page cache, so its fsync waited for them
// as well as for the records: with eight synced writers, those fsyncs
// took 0.8-0.9 ms against 0.15-0.17 for the others and set the writes'
// p99 (docs/wal.md). A zeroer writes them instead from a goroutine of its
// own, through a second descriptor opened for direct I/O, and syncs them
// itself: the pages never enter the cache, so no fsync of the log waits
// for them. It only writes at or past the offset the log may still reach
// (keepBelow): the log's bytes and the zeros never share a page in flight.

// zeroChunk is how much a zeroer writes at a time: a log overtaking it
// waits for one chunk at most.
const zeroChunk = 256 << 10

// zeroer keeps zeros ahead of a log on disk, past the page cache.
type zeroer struct {
	direct vfs.DirectFile
	sync   func() error // direct's fdatasync (vfs.DataSync)
	buf    manual.Buf   // zeroChunk zero bytes, page-aligned (mapped)
	want   chan int64   // the offset to zero up to, the latest ask
	quit   chan struct{}
	exited chan struct{}
	// to is the offset up to which the file holds the zeros: past the
	// log's end, on disk. failed is set once a write or sync fails: the
	// Writer then zeroes through the cache again.
	to     atomic.Int64
	failed atomic.Bool
	// mu is held while a chunk is written; floor is the lowest offset the
	// next chunk may start at, raised by keepBelow.
	mu    sync.Mutex
	floor int64
}

// startZeroer starts a zeroer for f whose zeros begin at from (a page
// boundary), or returns nil where f cannot be written with direct I/O.
func startZeroer(f SyncFile, from int64) *zeroer {
	buf := manual.New(zeroChunk)
	if !buf.Mapped() {
		buf.Free()
		return nil
	}
	direct, ok := vfs.OpenDirect(f)
	if !ok {
		buf.Free()
		return nil
	}
	z := &zeroer{direct: direct, sync: vfs.DataSync(direct), buf: buf, want: make(chan int64, 1), quit: make(chan struct{}), exited: make(chan struct{}), floor: from}
	z.to.Store(from)
	go z.run()
	return z
}

// ask has the zeroer extend the zeros up to off, without waiting.
func (z *zeroer) ask(off int64) {
	select {
	case <-z.want: // a later ask supersedes one not taken yet
	default:
	}
	z.want <- off
}

// keepBelow makes sure no zeros are written below off from now on: the
// log is about to write there. It waits for a chunk in flight only when
// the zeros have not got past off yet.
func (z *zeroer) keepBelow(off int64) {
	if off <= z.to.Load() {
		return
	}
	z.mu.Lock()
	z.floor = max(z.floor, off)
	z.mu.Unlock()
}

func (z *zeroer) run() {
	defer close(z.exited)
	for {
		select {
		case off := <-z.want:
			if !z.fill(off) {
				z.failed.Store(true)
				return
			}
		case <-z.quit:
			// An ask not taken yet is filled still: the Writer's last
			// round before Close leaves the zeros it asked for, as
			// zeroFill does.
			select {
			case off := <-z.want:
				z.fill(off)
			default:
			}
			return
		}
	}
}

// fill writes zeros up to off a chunk at a time, then syncs them (their
// blocks and the file's size), and reports whether all went well.
func (z *zeroer) fill(off int64) bool {
	wrote := false
	for {
		z.mu.Lock()
		from := max(z.to.Load(), z.floor)
		n := min(off-from, zeroChunk)
		if n <= 0 {
			z.mu.Unlock()
			break
		}
		_, err := z.direct.WriteAt(z.buf.Bytes()[:n], from)
		if err == nil {
			z.to.Store(from + n)
		}
		z.mu.Unlock()
		if err != nil {
			return false
		}
		wrote = true
	}
	return !wrote || z.sync() == nil
}

// stop ends the zeroer's goroutine, once it has filled the last ask, and
// closes its descriptor.
func (z *zeroer) stop() {
	close(z.quit)
	<-z.exited
	z.direct.Close()
	z.buf.Free()
}

// clearForLog keeps the zeroer, if any, off the pages that a write out to
// end touches, and has zeroLastPage take the zeros it wrote for pages the
// page cache does not hold.
func (w *Writer) clearForLog(end int64) {
	if w.zeros == nil {
		return
	}
	w.zeros.keepBelow(alignPage(end))
	w.uncached = max(w.uncached, w.zeros.to.Load())
}

// refillZeros keeps zeros past a log that reaches end, after a round that
// fsyncs: through a zeroer, started at the first such round, or through
// the page cache, whose zeros the round's fsync writes (zeroFill), where
// the file has no direct I/O. The cache's are refilled in small steps,
// whenever fewer than seven eighths of ZeroAhead bytes are left, for a
// round's fsync waits for them. The zeroer's steps are a ZeroAhead each,
// keeping one to two ahead: no fsync waits for its zeros, but one waits
// for the journal commit of the file's new size, once a step.
func (w *Writer) refillZeros(end int64) {
	if w.zeros != nil && w.zeros.failed.Load() {
		w.zeros.stop()
		w.zeros, w.cachedZeros = nil, true
	}
	if w.zeros == nil && !w.cachedZeros {
		w.zeros = startZeroer(w.f, alignPage(max(w.zeroedTo, end)))
		w.cachedZeros = w.zeros == nil
	}
	if w.zeros != nil {
		if max(w.zeroedTo, w.zeros.to.Load())-end < w.zeroAhead {
			w.zeros.ask(alignPage(end + 2*w.zeroAhead))
		}
		return
	}
	if w.zeroedTo-end < w.zeroAhead-w.zeroAhead/8 {
		from, to := max(w.zeroedTo, end), alignPage(end+w.zeroAhead)
		if zeroFill(w.f, from, to-from) {
			w.zeroedTo = to
		} else {
			w.zeroAhead = 0 // not an OS file, or the write failed: appends grow it
		}
	}
}
