package lsm

import (
	"bytes"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// TestPacer: writes pass at once until the bytes reserved are a
// millisecond ahead at the rate, then wait for their turn; time that
// passes pays the debt off.
func TestPacer(t *testing.T) {
	var p pacer
	t0 := time.Unix(1000, 0)
	const rate = 1 << 20 // a 1 KiB write takes ~0.98 ms
	if w := p.reserve(t0, 512, rate); w != 0 {
		t.Fatalf("the first write waits %v", w)
	}
	if w := p.reserve(t0, 512, rate); w != 0 {
		t.Fatalf("a write under a millisecond ahead waits %v", w)
	}
	w := p.reserve(t0, 1024, rate)
	if want := 2 * time.Second / 1024; w < want-time.Microsecond || w > want+time.Microsecond {
		t.Fatalf("2 KiB reserved at 1 MiB/s: wait %v, want %v", w, want)
	}
	if w := p.reserve(t0.Add(10*time.Millisecond), 512, rate); w != 0 {
		t.Fatalf("after the debt was paid off a write waits %v", w)
	}
}

// TestWritesSlowDownBeforeTheyStall: with L0 at the slowdown threshold
// (compactions held back, the stop threshold out of reach), writes go on,
// paced; below it, none is paced. L0 grows only by explicit flushes: the
// memtable holds every write of the test.
func TestWritesSlowDownBeforeTheyStall(t *testing.T) {
	opts := smallOptions()
	opts.FS = vfs.NewMem()
	opts.MemTableSize, opts.InitialMemTableSize = 8<<20, -1
	opts.L0SlowdownWritesThreshold, opts.L0StopWritesThreshold = 2, 1000
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Hold L0 compactions back, so that L0 only grows.
	db.mu.Lock()
	db.opts.L0CompactionThreshold = 1000
	db.mu.Unlock()
	// 8 KiB values: half a millisecond each at the pace, far faster
	// unpaced, even under the race detector.
	value := func(j int) []byte { return bytes.Repeat(faultValue(j), 8<<10/len(faultValue(j))) }
	i := 0
	writeFlush := func(n int) Metrics {
		t.Helper()
		for range n {
			if err := db.Set(faultKey(i), value(i), &WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			i++
		}
		m := db.Metrics()
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	writeFlush(10) // L0: 1 table
	if m := writeFlush(200); m.Slowdown.Count != 0 || m.Levels[0].Files != 1 {
		t.Fatalf("with %d L0 table: %d writes slowed", m.Levels[0].Files, m.Slowdown.Count)
	}
	// L0: 2 tables. 1.6 MB at 16 MiB/s: about 100 ms of waits.
	if m := writeFlush(200); m.Slowdown.Count == 0 || m.Slowdown.Duration < time.Millisecond || m.Levels[0].Files != 2 {
		t.Fatalf("with %d L0 tables: %d writes slowed for %v", m.Levels[0].Files, m.Slowdown.Count, m.Slowdown.Duration)
	}
	for j := range i {
		v, err := db.Get(faultKey(j))
		if err != nil || !bytes.Equal(v, value(j)) {
			t.Fatalf("key %d: %d bytes, %v", j, len(v), err)
		}
	}
}
