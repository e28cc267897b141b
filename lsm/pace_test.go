package lsm

import (
	"math"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// TestWritePaceFollowsTheFlush checks the pace's arithmetic: the mutable
// memtable may take its runway, and of the rest of its arena the share
// that the flush ahead of it has read of what it must drain; all of it
// once that is done.
func TestWritePaceFollowsTheFlush(t *testing.T) {
	opts := smallOptions()
	opts.FS = vfs.NewMem()
	opts.MemTableSize = 1 << 20
	db := openTestDB(t, "/db", opts) // MemTableStopWritesThreshold 1
	defer db.Close()

	db.mu.Lock()
	saved, savedMutable := db.mem.queue, db.mem.mutable
	ahead := db.newMemTable(1<<20, 0)
	mem := db.newMemTable(1<<20, 0)
	huge := db.newMemTable(3<<20, 0) // a large batch's own
	small := db.newMemTable(256<<10, 0)
	db.mem.queue, db.mem.mutable = []*memTable{ahead}, mem
	full := db.newPaceLocked()
	db.mem.mutable = huge
	behindHuge := db.newPaceLocked()
	db.mem.mutable = small
	behindSmall := db.newPaceLocked()
	db.mem.queue, db.mem.mutable = saved, savedMutable
	db.mu.Unlock()
	defer func() {
		for _, m := range []*memTable{ahead, mem, huge, small} {
			m.unref()
		}
	}()

	if full == nil || full.need != int64(ahead.Capacity()) {
		t.Fatalf("a full memtable behind a full one: pace %+v, want one that needs all of the queue", full)
	}
	// A memtable larger than the threshold waits for the whole queue, not
	// for more than it holds (the pace would never end).
	if behindHuge == nil || behindHuge.need != int64(ahead.Capacity()) {
		t.Fatalf("a huge memtable behind a full one: pace %+v, want one that needs all of the queue", behindHuge)
	}
	// 1 MiB + 256 KiB is past the threshold: a quarter of the queue must
	// drain before the small memtable can rotate.
	if behindSmall == nil || behindSmall.need != 256<<10 {
		t.Fatalf("a 256 KiB memtable behind a full one: pace %+v, want one that needs 256 KiB", behindSmall)
	}

	capacity := int64(mem.Capacity())
	runway := int64(float64(capacity) * paceRunway)
	ahead.firstSeq, ahead.lastSeq = 1, 1000 // rotated holding 1,000 entries
	if room := full.room(); room != runway || full.holds(int(runway)) || !full.holds(int(runway)+1) {
		t.Fatalf("nothing flushed: room %d, holds a write of the runway: %v, of a byte more: %v; want %d, false and true",
			room, full.holds(int(runway)), full.holds(int(runway)+1), runway)
	}
	ahead.flushed.Store(500)
	half := int64(float64(capacity) * (paceRunway + (1-paceRunway)/2))
	if room := full.room(); room != half {
		t.Fatalf("half flushed: room %d, want %d", room, half)
	}
	mem.reserved.Store(half - 100)
	if full.holds(100) || !full.holds(101) {
		t.Fatalf("100 bytes short of the pace: holds 100 bytes %v, 101 bytes %v; want false, true", full.holds(100), full.holds(101))
	}
	// The small memtable needs only a quarter of the queue drained.
	ahead.flushed.Store(250)
	if room := behindSmall.room(); room != int64(small.Capacity()) {
		t.Fatalf("a quarter flushed: the small memtable's room %d, want all of it, %d", room, small.Capacity())
	}
	// Read through (its table not installed yet, and no flush before it
	// took time to finish), then installed: no write is held, not even
	// one larger than the memtable, which then rotates it.
	for _, flushed := range []int64{1000, math.MaxInt64} {
		ahead.flushed.Store(flushed)
		if room := full.room(); room != capacity || full.holds(int(2*capacity)) {
			t.Fatalf("flushed %d of 1000 entries: room %d, holds a write larger than the memtable: %v; want %d and false", flushed, room, full.holds(int(2*capacity)), capacity)
		}
	}
}

// TestWritePaceCountsTheFlushTail checks that the pace keeps back the
// share of the memtable that the flush's finishing (its table's fsync,
// the manifest's edit) took last time, and lets it fill as that time
// passes, so that a writer does not wait for the whole finishing at the
// rotation.
func TestWritePaceCountsTheFlushTail(t *testing.T) {
	opts := smallOptions()
	opts.FS = vfs.NewMem()
	db := openTestDB(t, "/db", opts)
	defer db.Close()
	ahead, mem := db.newMemTable(1<<20, 0), db.newMemTable(1<<20, 0)
	defer ahead.unref()
	defer mem.unref()
	p := &writePace{mem: mem, ahead: []*memTable{ahead}, need: int64(ahead.Capacity())}
	capacity := float64(mem.Capacity())
	// within checks the room for a flush's share drained: the runway and
	// that share of the rest.
	within := func(what string, share float64) {
		t.Helper()
		want := paceRunway + (1-paceRunway)*share
		if room := float64(p.room()); room < want*capacity-1 || room > want*capacity+capacity/1000 {
			t.Fatalf("%s: room %.4f of the memtable, want %.4f", what, room/capacity, want)
		}
	}

	// The last flush spent a fifth of its time after its reading.
	now := time.Now()
	last := db.newMemTable(1<<20, 0)
	defer last.unref()
	last.readEnd.Store(now.Add(-20 * time.Millisecond).UnixNano())
	db.recordFlushTail([]*memTable{last}, now.Add(-100*time.Millisecond), now)
	if tail := math.Float64frombits(db.flushTail.Load()); tail < 0.19 || tail > 0.25 {
		t.Fatalf("a flush that read for 80 ms and finished in 20: tail %.3f, want about 0.2", tail)
	}
	db.flushTail.Store(math.Float64bits(0.2))

	ahead.firstSeq, ahead.lastSeq = 1, 1000
	ahead.flushed.Store(500)
	within("half read", 0.4)
	// Read through a moment ago, after an hour of reading: the finishing
	// is expected to take a quarter of that, and has barely begun.
	ahead.flushed.Store(1000)
	ahead.flushStart.Store(time.Now().Add(-time.Hour).UnixNano())
	ahead.readEnd.Store(time.Now().UnixNano())
	within("read through, finishing begun", 0.8)
	// Read through as long ago as the finishing should take: all of it.
	ahead.flushStart.Store(time.Now().Add(-50 * time.Millisecond).UnixNano())
	ahead.readEnd.Store(time.Now().Add(-10 * time.Millisecond).UnixNano())
	within("finishing as long as expected", 1)

	// A flush that read nothing before it finished (held up) sets the
	// tail no higher than maxFlushTail.
	last.readEnd.Store(now.Add(-time.Millisecond).UnixNano())
	db.recordFlushTail([]*memTable{last}, now.Add(-time.Millisecond), now)
	if tail := math.Float64frombits(db.flushTail.Load()); tail != maxFlushTail {
		t.Fatalf("a flush that finished for all its time: tail %.3f, want %v", tail, maxFlushTail)
	}
}

// TestRotatedMemTableCountsItsEntries: the pace reads a queued memtable's
// entry count off its sequence numbers, so a memtable must start at the
// sequence number after the last one the memtable before it holds.
func TestRotatedMemTableCountsItsEntries(t *testing.T) {
	fs := &gatedFS{FS: vfs.NewMem(), gate: make(chan struct{})}
	opts := smallOptions()
	opts.FS = fs
	// Room for two memtables waiting: the pace must not hold the writes
	// to the second while the first's flush is held.
	opts.MemTableStopWritesThreshold = 2
	db := openTestDB(t, "/db", opts)
	defer db.Close()
	defer close(fs.gate)
	flushed := make(chan error, 2)
	for i, entries := range []int{7, 5} {
		b := db.NewBatch()
		for k := range entries - 1 {
			b.Set(faultKey(100*i+k), faultValue(k))
		}
		if err := db.Apply(b, &WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := db.Set(faultKey(100*i+99), faultValue(0), &WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		go func() { flushed <- db.Flush() }() // rotates, then waits for the held flush
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			db.mu.Lock()
			queued := len(db.mem.queue)
			db.mu.Unlock()
			if queued == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("memtable %d never rotated", i)
			}
		}
		db.mu.Lock()
		m := db.mem.queue[i]
		got := int64(m.lastSeq) - int64(m.firstSeq) + 1
		db.mu.Unlock()
		if got != int64(entries) {
			t.Fatalf("memtable %d: sequence numbers %d to %d, %d entries; want %d", i, m.firstSeq, m.lastSeq, got, entries)
		}
	}
}
