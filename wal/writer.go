package wal

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/tabuladb/tabula/internal/manual"
	"github.com/tabuladb/tabula/vfs"
)

// SyncFile is what a Writer appends to. vfs.File satisfies it.
type SyncFile interface {
	io.Writer
	// Sync makes everything written so far durable.
	Sync() error
}

// DefaultMaxBuffered is the default bound on bytes that WriteRecord has
// accepted but the background goroutine has not yet handed to the file.
const DefaultMaxBuffered = 4 << 20

// WriterOptions configures a Writer. The zero value is ready to use.
type WriterOptions struct {
	// MaxBuffered bounds the bytes accepted but not yet written to the
	// file; WriteRecord blocks while more than this is outstanding, so a
	// slow disk pushes back on committers instead of growing memory. A
	// single record larger than the bound is still accepted whole. Zero
	// means DefaultMaxBuffered.
	MaxBuffered int
	// OnSync, when set, is called by the background goroutine after each
	// successful fsync, outside the Writer's lock, with how long the fsync
	// took and how many SyncTo callers were waiting for it when it began
	// (the size of the commit group it serves; 0 for an fsync nobody waited
	// for: Close's, or one BytesPerSync made).
	// It must be quick: the next fsync waits for it. It is for metrics.
	OnSync func(d time.Duration, waiters int)
	// BytesPerSync, when positive, makes the background goroutine start
	// the kernel's writeback of the file whenever that many bytes were
	// written out since the last fsync or writeback, though no SyncTo
	// asked for it: sync_file_range(2) on Linux, which does not wait for
	// the disk; an fsync where that is not available. Close must make
	// everything durable, and an unsynced log of tens of MiB then took
	// tens of milliseconds, on its caller's time; writing back as the log
	// grows leaves Close little to do. (An fsync here held the writers up
	// instead: while it ran, nothing was written out, and they met
	// MaxBuffered.)
	BytesPerSync int
	// Blocks, when set, is where the Writer takes its in-memory blocks
	// and gives back those it wrote out; nil means a pool of its own.
	// The Writers of a log's successive segments share one, so that a new
	// segment reuses its predecessor's blocks (up to MaxBuffered of them)
	// instead of allocating its own.
	Blocks *BlockPool
	// Previous, when set, is called once, on a goroutine of its own, and
	// blocks until the log segment before this one is closed: written
	// out and fsynced. The Writer hands its file bytes meanwhile, but
	// fsyncs nothing before it returns, so no SyncTo (and no Close)
	// returns before every older segment is durable; a non-nil error
	// stops the Writer as a failed write would. A crash during that close
	// may so leave this segment with bytes and the older one torn: a
	// reader of the segments must take the first gap in what they hold
	// as the end of the log (the engine does: docs/wal.md). Writing
	// nothing before the close, as this did, held unsynced writers up on
	// MaxBuffered while the close's fsync waited for the disk.
	Previous func() error
	// LogNum, when nonzero, is the number of the log this Writer writes,
	// and makes its chunks recyclable: each carries the number (its low
	// 32 bits) and a salt the Writer draws at random, so that the file may
	// be one that held another log before, overwritten from its start. A
	// reader given the number (NewRecyclableReader) ends the log where the
	// older log's bytes begin. A reused file saves the filesystem the
	// allocation, and the journal commit, that appending costs at every
	// fsync.
	LogNum uint64
	// ZeroAhead, when positive, gives a recyclable log's fsyncs (LogNum
	// set) the same saving past the end of the file it writes over, new
	// or reused (see Allocated): after a round that fsyncs, zeros are
	// kept past the log's end, by a goroutine with direct I/O where the
	// file has it (one to two ZeroAhead ahead: zero_ahead.go), else by
	// the round itself, whose fsync makes them the file's: whenever fewer
	// than seven eighths of ZeroAhead bytes beyond the end are the
	// file's, up to ZeroAhead. (Refilling from
	// half-way, a round's fsync wrote half of ZeroAhead more: the synced
	// writers it held up made fillsync8's p99 1.07-1.13 of Pebble's,
	// against 0.93-0.96 in eighths.) The fsyncs that follow then
	// overwrite blocks the file holds instead of growing it, which
	// costs each fsync a journal commit for the file's new size and
	// blocks: on ext4 here a small synced write took a fifth less CPU
	// and a third less time written over zeros (p50 161-178 us against
	// 264-295, appending). A reader ends a recyclable log where the
	// zeros begin, as it does at an older log's bytes. Only OS files are
	// zeroed (the write is at an offset, pwrite(2) on Linux). Allocated
	// is how many bytes the file holds already (a reused file's): the
	// Writer drops them from the page cache before its first write and
	// zeroes ahead over them as past a new file's end, so that the older
	// log's folios (sized by its writes, 32 KiB and up for unsynced
	// batches) are not what small synced writes dirty and fsync whole.
	ZeroAhead int64
	Allocated int64

	// cachedZeros has the Writer zero ahead through the page cache even
	// where the file has direct I/O (tests of that path).
	cachedZeros bool
}

// ErrWriterClosed is returned by calls made on a Writer after Close.
var ErrWriterClosed = errors.New("wal: writer closed")

// block is one BlockSize slice of the log being assembled in memory.
type block struct {
	// buf is BlockSize bytes outside the Go heap when the system grants a
	// mapping (internal/manual): a burst of blocks (up to MaxBuffered
	// while a rotation's previous segment closes) then costs its size in
	// resident memory, not also as much again of the collector's headroom
	// over a heap that briefly held it.
	buf []byte
	// mem is buf's allocation; cleanup frees it if the block is dropped
	// unreturned (a Writer abandoned after a failure). BlockPool.put
	// frees the blocks it does not keep at once.
	mem     manual.Buf
	cleanup runtime.Cleanup
	// n is how many bytes of buf hold chunks (or trailer padding).
	n int
	// written is how many bytes of buf the background goroutine has
	// handed to the file. Only that goroutine changes it (under mu), so
	// it can read buf[written:n] without the lock while WriteRecord keeps
	// appending beyond n.
	written int
}

// Writer appends records to a log file. WriteRecord calls must be
// serialized by the caller; SyncTo, Size and Close may be called from any
// goroutine.
type Writer struct {
	f            SyncFile
	sync         func() error // f's fdatasync (vfs.DataSync)
	l            layout
	maxBuffered  int64
	bytesPerSync int64
	onSync       func(time.Duration, int)
	// previousOpen is set while WriterOptions.Previous has not returned.
	previousOpen bool
	// blocks holds the blocks written out, for reuse.
	blocks *BlockPool

	// wake carries a "there is work" signal to the background goroutine.
	// It has a buffer of one and is only sent to when pending is false, so
	// signalling costs a flag test on the common path.
	wake chan struct{}
	quit chan struct{}
	done chan struct{}

	mu sync.Mutex
	// cond is broadcast whenever flushed or synced advances or err is set;
	// SyncTo callers and WriteRecord calls held up by backpressure wait on
	// it.
	cond sync.Cond
	// cur is the block being filled; full holds filled blocks, in file
	// order, that are not yet completely written out.
	cur  *block
	full []*block
	// logical is the offset just past the last byte appended (Size).
	logical int64
	// flushed is the offset up to which bytes were handed to the file.
	flushed int64
	// synced is the offset up to which the file is known durable. Every
	// chunk records it, so readers can tell torn tails from corruption.
	synced int64
	// syncReq is the largest offset a SyncTo caller needs durable.
	syncReq int64
	// err is the first write or fsync failure. Once set, the file's
	// contents are unknown, so every later call fails with it.
	err     error
	pending bool
	closing bool
	closed  bool

	// Group commit gathering. waiting counts SyncTo calls blocked now;
	// joined counts those that asked for durability since the last
	// round was gathered; expect is how many were in SyncTo when the last
	// fsync finished, i.e. how many committers are cycling. See
	// gatherLocked.
	waiting   int
	joined    int
	expect    int
	gathering bool
	lastSync  time.Duration
	// arrived tells a gathering flusher that joined grew.
	arrived chan struct{}
	timer   *time.Timer

	// zeroAhead is WriterOptions.ZeroAhead, zeroedTo the offset up to
	// which the file holds bytes in the page cache (zeros past the log's
	// end). uncached is where the pages end that the file holds on disk
	// only: the reused file's this Writer dropped from the page cache
	// (dropOlder), and the zeros the zeroer wrote; a write ending inside
	// one of them past zeroedTo zeroes its page first. All are the
	// background goroutine's, as are zeros (nil until a round fsyncs, and
	// where the file has no direct I/O) and cachedZeros, set where it has
	// none, or had until a zeroer failed.
	zeroAhead, zeroedTo, uncached int64
	zeros                         *zeroer
	cachedZeros                   bool
	// dropOlder asks the background goroutine to drop the reused file's
	// cached pages before its first write (WriterOptions.Allocated).
	dropOlder bool

	// handOff is armed by a record that leaves no write-out asked for:
	// see handOffDelay.
	handOff      *time.Timer
	handOffArmed bool
}

// handOffDelay is how long a record may wait in memory before the
// background goroutine hands it to the file, when no fsync is asked for.
// A SyncTo, or handOffBlocks filled blocks, wake the goroutine at once.
// Waking it for every record instead cost the writer the wake-up (a
// futex call when the goroutine sleeps) on a record in a few dozen: in a
// million single-key unsynced overwrites on two cores, three interleaved
// runs each, p99 fell from 12.7-14.6 us to 7.3-9.6 (p50 2.2-2.5 either
// way). So an unsynced record reaches the kernel within about this delay,
// and a process crash may lose the records of that last millisecond (a
// machine crash, everything not synced).
const handOffDelay = time.Millisecond

// handOffBlocks is how many filled blocks wake the background goroutine
// without waiting for the hand-off timer. Waking it for every filled
// block cost the record that filled it a wake-up too: in a million
// unsynced single-key sets of 300 bytes, the one record in a hundred that
// crossed into a new block took 11.6-12.6 us at the median against 2.2
// for the others, and set the p99 (15 us; 9-12 waking every 8 blocks).
// At a few blocks a millisecond the timer fires first; a faster writer
// pays a wake-up once per handOffBlocks blocks, and the buffered bytes
// stay far below MaxBuffered.
const handOffBlocks = 8

// maxGatherDelay caps how long the flusher holds an fsync back waiting for
// committers to join it.
const maxGatherDelay = time.Millisecond

// NewWriter returns a Writer appending to f from the file's start:
// offsets are counted from there. f must be empty, unless
// WriterOptions.LogNum makes the chunks recyclable: then it may hold an
// older log, which the writes overwrite. It starts a background goroutine
// that Close stops.
func NewWriter(f SyncFile, opts WriterOptions) *Writer {
	maxBuffered := opts.MaxBuffered
	if maxBuffered <= 0 {
		maxBuffered = DefaultMaxBuffered
	}
	blocks := opts.Blocks
	if blocks == nil {
		blocks = NewBlockPool(maxBuffered)
	}
	w := &Writer{
		f:            f,
		sync:         vfs.DataSync(f),
		l:            layout{recyclable: opts.LogNum != 0, logNum: uint32(opts.LogNum), salt: rand.Uint32(), saltKnown: true},
		maxBuffered:  int64(maxBuffered),
		bytesPerSync: int64(opts.BytesPerSync),
		previousOpen: opts.Previous != nil,
		onSync:       opts.OnSync,
		blocks:       blocks,
		wake:         make(chan struct{}, 1),
		quit:         make(chan struct{}),
		done:         make(chan struct{}),
		arrived:      make(chan struct{}, 1),
		timer:        time.NewTimer(time.Hour),
		cur:          blocks.get(),
	}
	if opts.LogNum != 0 {
		w.zeroAhead, w.zeroedTo = opts.ZeroAhead, opts.Allocated
		w.cachedZeros = opts.cachedZeros
		w.dropOlder = opts.ZeroAhead > 0 && opts.Allocated > 0
	}
	w.timer.Stop()
	w.handOff = time.AfterFunc(time.Hour, func() {
		w.mu.Lock()
		w.handOffArmed = false
		w.signalLocked()
		w.mu.Unlock()
	})
	w.handOff.Stop()
	w.cond.L = &w.mu
	if opts.Previous != nil {
		go w.awaitPrevious(opts.Previous)
	}
	go w.flushLoop()
	return w
}

// WriteRecord appends one record and returns the file offset just past it,
// to be passed to SyncTo when the record must be durable. It only copies p
// into memory and never waits for an fsync; it blocks only while more than
// MaxBuffered bytes wait to be written. Callers serialize calls.
func (w *Writer) WriteRecord(p []byte) (end int64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return 0, err
	}
	for w.logical-w.flushed > w.maxBuffered {
		w.signalLocked()
		w.cond.Wait()
		if err := w.usableLocked(); err != nil {
			return 0, err
		}
	}
	// Read once so that every chunk of the record carries the same value:
	// the durable offset cannot lie inside this record.
	syncOffset := w.synced
	first := true
	filled := false
	hs := w.l.headerSize()
	for {
		b := w.cur
		left := BlockSize - b.n
		if left < hs {
			// Blocks are reused, so the trailer must be zeroed explicitly.
			clear(b.buf[b.n:])
			b.n = BlockSize
			w.logical += int64(left)
			w.rotateLocked()
			filled = true
			continue
		}
		n := min(len(p), left-hs)
		last := n == len(p)
		var typ byte
		switch {
		case first && last:
			typ = chunkFull
		case first:
			typ = chunkFirst
		case last:
			typ = chunkLast
		default:
			typ = chunkMiddle
		}
		copy(b.buf[b.n+hs:], p[:n])
		w.l.putChunk(b.buf[b.n:], n, typ, syncOffset)
		b.n += hs + n
		w.logical += int64(hs + n)
		p = p[n:]
		first = false
		if b.n == BlockSize {
			w.rotateLocked()
			filled = true
		}
		if last {
			break
		}
	}
	switch {
	case filled && len(w.full) >= handOffBlocks:
		w.signalLocked()
	case !w.handOffArmed && !w.pending:
		w.handOffArmed = true
		w.handOff.Reset(handOffDelay)
	}
	return w.logical, nil
}

// SyncTo blocks until every byte before end (an offset WriteRecord
// returned; at most Size) is durable. Callers that arrive while an fsync
// runs are covered together by the next one, so concurrent committers
// share fsyncs (group commit). After a write or fsync failure it returns
// that failure, even for data that was synced before it.
func (w *Writer) SyncTo(end int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if end > w.logical {
		return fmt.Errorf("wal: sync to offset %d beyond the log's size %d", end, w.logical)
	}
	if w.err == nil && w.synced < end && !w.closed {
		w.waiting++
		defer func() { w.waiting-- }()
		w.joined++
		if w.gathering {
			select {
			case w.arrived <- struct{}{}:
			default:
			}
		}
	}
	for {
		if w.err != nil {
			return w.err
		}
		if w.synced >= end {
			return nil
		}
		if w.closed {
			return ErrWriterClosed
		}
		if w.syncReq < end {
			w.syncReq = end
		}
		w.signalLocked()
		w.cond.Wait()
	}
}

// Size returns the log's logical size: every byte appended so far,
// including bytes not yet written to the file.
func (w *Writer) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logical
}

// Close writes out and fsyncs everything appended, then stops the
// background goroutine. It does not close the file. Later calls return the
// first call's result.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closing {
		// Wait for the first Close to finish so both report the same.
		for !w.closed {
			w.cond.Wait()
		}
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.closing = true
	w.syncReq = w.logical
	for w.err == nil && w.synced < w.logical {
		w.signalLocked()
		w.cond.Wait()
	}
	// A Writer that got no record (so fsynced nothing) still waits for
	// the segment before it: its Close, like any, leaves everything
	// before it durable.
	for w.previousOpen {
		w.cond.Wait()
	}
	w.closed = true
	err := w.err
	w.cond.Broadcast()
	w.mu.Unlock()
	w.handOff.Stop()
	close(w.quit)
	<-w.done
	if err == nil {
		// Everything is written out and nothing appends any more. (After
		// a failure, blocks may still be queued: they are left to the
		// collector.)
		w.mu.Lock()
		w.blocks.put(w.cur)
		w.cur = nil
		w.mu.Unlock()
	}
	return err
}

// awaitPrevious waits for the segment before this one to be closed
// (WriterOptions.Previous); its failure is the Writer's.
func (w *Writer) awaitPrevious(previous func() error) {
	err := previous()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.previousOpen = false
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("wal: the previous segment: %w", err)
	}
	w.cond.Broadcast()
}

// previousDurable waits until the segment before this one is closed, and
// returns the Writer's failure, if any.
func (w *Writer) previousDurable() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.previousOpen {
		w.cond.Wait()
	}
	return w.err
}

// usableLocked returns the error that stops new records, if any.
func (w *Writer) usableLocked() error {
	if w.err != nil {
		return w.err
	}
	if w.closing {
		return ErrWriterClosed
	}
	return nil
}

// signalLocked tells the background goroutine there is work, unless a
// signal it has not yet acted on is outstanding.
func (w *Writer) signalLocked() {
	if w.pending {
		return
	}
	w.pending = true
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// rotateLocked queues the filled current block for writing and starts a
// new one.
func (w *Writer) rotateLocked() {
	w.full = append(w.full, w.cur)
	w.cur = w.blocks.get()
}
