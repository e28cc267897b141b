package lsm

import (
	"math"
	"slices"
	"time"

	"github.com/tabuladb/tabula/internal/base"
)

// Memtable pacing. Once the mutable memtable's rotation would stall
// (memTableStallLocked: the memtables queued ahead of it and it would be
// more than MemTableStopWritesThreshold full memtables' worth), a writer
// that fills it faster than the flush ahead of it drains the queue fills
// it early and then waits, with the commit lock held, for the rest of
// that flush: a stall as long as the flush's lead. Instead the memtable's
// fill is tied to the flush's progress: writers may fill the share of it
// that the flush has drained of what it must, so that it is full about
// when the flush is done. They then wait a millisecond now and then,
// outside the commit lock, as the L0 slowdown's do (slowdown.go), and
// the bound on memtable memory holds without a long stall. Measured with
// flushes slower than the fills (zstd tables, 1M keys, 64 MiB memtables):
// the longest stall of a fill went from 300-500 ms with one memtable
// flushing and no pace to 31-59 ms with the pace.
//
// The first paceRunway of the memtable is not paced: a flush starts some
// milliseconds after the rotation that queued its memtable (its goroutine
// waits for a CPU, opens its table) and reports progress a thousand
// entries at a time, so a pace that followed it from the first byte held
// the writers at every rotation, though the flush went on to drain its
// memtable long before theirs filled (bench tail -workload batch100, 1M
// keys: 18 waits a run, 67 ms in all, every one in the first 7% of a
// memtable). The rest of the memtable follows the flush, so that it is
// still full no sooner than the flush is done.
//
// The flush's reading is counted in entries (a rotated memtable's count
// follows from its sequence numbers), not bytes: the flush reads
// each memtable back in key order, not in the order its arena filled, and
// the entries read are what it knows. With entries of unequal sizes the
// pace is approximate; the bound is not, since the rotation still stalls
// if the flush is behind.

// writePace ties the fill of a mutable memtable to the flush of the
// memtables queued ahead of it.
type writePace struct {
	mem   *memTable
	ahead []*memTable // the queue when mem became the mutable memtable
	// need is how many bytes of ahead's arenas must be flushed before mem
	// can be rotated without a stall.
	need int64
}

// newPaceLocked returns the pace of the mutable memtable, nil if its
// rotation would not stall. Called with db.mu held, once the memtable
// became the mutable one.
func (db *DB) newPaceLocked() *writePace {
	if !db.memTableStallLocked() {
		return nil
	}
	mem := db.mem.mutable
	var queued int64
	for _, m := range db.mem.queue {
		queued += int64(m.Capacity())
	}
	// A memtable larger than the threshold (a large batch's own) would
	// stall even with the queue empty: it waits for all of the queue.
	need := min(queued, queued+int64(mem.Capacity())-int64(db.opts.MemTableStopWritesThreshold)*db.opts.MemTableSize)
	return &writePace{mem: mem, ahead: slices.Clone(db.mem.queue), need: need}
}

// paceRunway is the share of a paced memtable that writers may fill
// before the pace follows the flush ahead of it.
const paceRunway = 0.25

// room returns how many bytes of the memtable writers may have reserved
// by now: the runway, and of the rest the share that the flush has
// drained of what it must; all of it once that is done.
func (p *writePace) room() int64 {
	var drained float64
	for _, m := range p.ahead {
		drained += float64(m.Capacity()) * m.flushedShare()
	}
	capacity := int64(p.mem.Capacity())
	if drained >= float64(p.need) {
		return capacity
	}
	return int64(float64(capacity) * (paceRunway + (1-paceRunway)*drained/float64(p.need)))
}

// dropDrainedPaceLocked drops the mutable memtable's pace once the flush
// it follows has drained what it must, so that writes stop computing it.
// Called with db.mu held, as a flush is installed.
func (db *DB) dropDrainedPaceLocked() {
	if p := db.pace.Load(); p != nil && p.room() == int64(p.mem.Capacity()) {
		db.pace.CompareAndSwap(p, nil)
	}
}

// holds reports whether a write of memSize bytes must wait for the flush.
// A write that would not fit in the memtable whole is not held once the
// flush has drained what it must: it rotates the memtable (or gets one of
// its own).
func (p *writePace) holds(memSize int) bool {
	room := p.room()
	return room < int64(p.mem.Capacity()) && p.mem.reserved.Load()+int64(memSize) > room
}

// paceWrite holds a write back while the mutable memtable is ahead of the
// flush it follows. It runs before the commit lock is taken; writers
// racing past it together overshoot the pace by their batches, which the
// rotation's stall still bounds.
func (db *DB) paceWrite(b *Batch) {
	p := db.pace.Load()
	if p == nil || !p.holds(b.memSize) {
		return
	}
	start := time.Now()
	db.metrics.pace.count.Add(1)
	defer db.metrics.pace.done(start)
	t := time.NewTimer(slowdownMinWait)
	defer t.Stop()
	for db.pace.Load() == p && p.holds(b.memSize) && !db.stopped.Load() && !db.closed.Load() {
		signal(db.flushSignal)
		select {
		case <-t.C:
			t.Reset(slowdownMinWait)
		case <-db.closing:
			return
		}
	}
}

// flushedShare is how far the memtable's flush is, from 0 to 1 once it
// is installed. A flush reads its memtables and then finishes its table
// (the last blocks, the fsync, the manifest's edit), reading nothing: on
// this machine's disk that fsync alone took 30-40 ms of a 64 MiB flush's
// 150. The reading counts for 1-tail of the share, by the entries read,
// and the finishing for tail, by the time since the reading ended against
// the time it is expected to take; tail is the share of the last flush's
// time spent finishing (flushTail). Without it, a writer paced to the
// reading alone filled its memtable as the reading ended, and stalled at
// the rotation for the whole fsync.
func (m *memTable) flushedShare() float64 {
	flushed := m.flushed.Load()
	if flushed == math.MaxInt64 {
		return 1
	}
	tail := math.Float64frombits(m.db.flushTail.Load())
	readEnd := m.readEnd.Load()
	if readEnd == 0 {
		read := 1.0
		if entries := int64(m.lastSeq) - int64(m.firstSeq) + 1; entries > 0 {
			read = min(1, float64(flushed)/float64(entries))
		}
		return read * (1 - tail)
	}
	if tail == 0 {
		return 1
	}
	expected := float64(readEnd-m.flushStart.Load()) * tail / (1 - tail)
	finishing := float64(time.Now().UnixNano() - readEnd)
	return 1 - tail + tail*min(1, finishing/max(expected, 1))
}

// maxFlushTail bounds the share of a flush's time that the pace expects
// it to spend finishing its table: a flush held up once (a slow fsync)
// must not make the next paces all but wait for the end.
const maxFlushTail = 0.5

// recordFlushTail notes the share of a flush of mems, begun at start and
// installed at end, spent after its reading: the next flushes' pace
// expects the same.
func (db *DB) recordFlushTail(mems []*memTable, start, end time.Time) {
	var readEnd int64
	for _, m := range mems {
		readEnd = max(readEnd, m.readEnd.Load())
	}
	if readEnd == 0 || !end.After(start) {
		return
	}
	tail := float64(end.UnixNano()-readEnd) / float64(end.Sub(start))
	db.flushTail.Store(math.Float64bits(min(max(tail, 0), maxFlushTail)))
}

// flushProgressEvery is how many entries a flush reads between updates
// of its memtable's progress: a 64 MiB memtable of 300-byte entries gets
// about two hundred.
const flushProgressEvery = 1024

// progressIter counts the entries a flush reads from a memtable into the
// memtable's flushed count, for the pace of the memtable after it.
type progressIter struct {
	base.InternalIterator
	m       *memTable
	pending int64
}

func (it *progressIter) First() bool { return it.count(it.InternalIterator.First()) }
func (it *progressIter) Next() bool  { return it.count(it.InternalIterator.Next()) }

func (it *progressIter) count(ok bool) bool {
	if ok {
		it.pending++
	}
	if it.pending == flushProgressEvery || !ok {
		it.m.flushed.Add(it.pending)
		it.pending = 0
	}
	if !ok && it.m.readEnd.Load() == 0 {
		it.m.readEnd.Store(time.Now().UnixNano())
	}
	return ok
}
