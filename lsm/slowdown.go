package lsm

import (
	"sync"
	"time"
)

// Write slowdown. A writer that finds L0 at its stop threshold waits for
// compaction with the commit lock held, and with one compaction at a time
// on a large store that wait can last seconds (a 20-million-key fill:
// bench -large). From L0SlowdownWritesThreshold tables on, writes are
// instead paced to slowdownRate bytes a second in all: the compaction gets
// the disk and the CPU to catch up while writes go on, each waiting a
// millisecond or so now and then rather than all of them waiting seconds
// at once. LevelDB sleeps a millisecond per write from its slowdown
// trigger; RocksDB paces writes to a rate (delayed_write_rate, 16 MiB/s by
// default), as here.

// slowdownRate is the pace of writes, in bytes a second, while L0 is at
// or past the slowdown threshold.
const slowdownRate = 16 << 20

// slowdownMinWait is the shortest wait: the pace's debt is let grow to it
// before a writer sleeps, since a sleep much shorter than that costs more
// in timer slack than it waits.
const slowdownMinWait = time.Millisecond

// pacer paces writes to a rate: each write reserves the time its bytes
// take at the rate after those reserved before it, and waits if that time
// is ahead of the clock by slowdownMinWait or more. Writers wait outside
// the commit lock, each for its own reservation.
type pacer struct {
	mu   sync.Mutex
	next time.Time // when the bytes reserved so far are paid for
}

// reserve reserves bytes at rate (bytes a second) and returns how long
// the writer must wait, 0 if not yet slowdownMinWait.
func (p *pacer) reserve(now time.Time, bytes int, rate float64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next.Before(now) {
		p.next = now
	}
	p.next = p.next.Add(time.Duration(float64(bytes) / rate * float64(time.Second)))
	if wait := p.next.Sub(now); wait >= slowdownMinWait {
		return wait
	}
	return 0
}

// slowWrite paces a write of b when L0 holds L0SlowdownWritesThreshold
// tables or more (and fewer than the stop threshold, which stalls
// instead). Without background compactions nothing would end it: writes
// are never slowed then, as they never stall (l0StallLocked).
func (db *DB) slowWrite(b *Batch) {
	o := &db.opts
	l0 := int(db.versions.l0Tables.Load())
	if o.DisableBackgroundCompactions || l0 < o.L0SlowdownWritesThreshold || o.L0SlowdownWritesThreshold >= o.L0StopWritesThreshold {
		return
	}
	start := time.Now()
	wait := db.slowdown.reserve(start, int(b.memSize), slowdownRate)
	if wait == 0 {
		return
	}
	db.metrics.slowdown.count.Add(1)
	defer db.metrics.slowdown.done(start)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-db.closing:
	}
}
