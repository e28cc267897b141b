package lsm

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// gatedFS holds every sstable creation (a flush's, a compaction's) until
// the gate opens: flushes then take as long as the test says.
type gatedFS struct {
	vfs.FS
	gate chan struct{}
}

func (g *gatedFS) Create(name string) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") {
		<-g.gate
	}
	return g.FS.Create(name)
}

// TestRotationUnderLoadHeldOnlyAtTheThreshold writes while no flush can
// start. Rotations that leave fewer than MemTableStopWritesThreshold
// memtables waiting never make a writer wait: the memtables fill, rotate
// and queue with nothing held. The memtable whose rotation would pass the
// threshold is paced to the flush ahead of it, which reads nothing while
// held: it takes no write past its runway (paceRunway), and the writer
// goes on as soon as the flushes do. (TestCloseWakesHeldWriter/stalled
// has flushes that read their memtables but cannot finish: the writer
// fills the memtable and stalls at its rotation.)
func TestRotationUnderLoadHeldOnlyAtTheThreshold(t *testing.T) {
	fs := &gatedFS{FS: vfs.NewMem(), gate: make(chan struct{})}
	opts := smallOptions()
	opts.FS = fs
	opts.MemTableSize = 64 << 10
	opts.MemTableStopWritesThreshold = 2
	db := openTestDB(t, "db", opts)
	defer db.Close()
	var release sync.Once
	open := func() { release.Do(func() { close(fs.gate) }) }
	defer open() // a failed check must not leave a writer stuck
	value := strings.Repeat("v", 1000)

	// A writer writes keys k0, k1, ... until until holds after a write,
	// then reports on done. The phases run one after the other, so n is
	// the writer's alone while it runs.
	n := 0
	done := make(chan error, 1)
	write := func(until func(Metrics) bool) {
		go func() {
			for ; ; n++ {
				if err := db.Set([]byte(fmt.Sprintf("k%08d", n)), []byte(value), nil); err != nil {
					done <- err
					return
				}
				if until(db.Metrics()) {
					done <- nil
					return
				}
			}
		}()
	}
	wait := func(what string) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			m := db.Metrics()
			t.Fatalf("%s: the writer is stuck (%d stalls, %d paced)", what, m.Stall.Count, m.Pace.Count)
		}
	}

	// Two rotations: two memtables wait for flushes that cannot start,
	// and no writer has waited.
	write(func(m Metrics) bool { return m.MemTable.Immutable == opts.MemTableStopWritesThreshold })
	wait("filling to the threshold")
	if m := db.Metrics(); m.Stall.Count != 0 || m.Pace.Count != 0 || m.Flush.Count != 0 {
		t.Fatalf("after two rotations with flushes held: %d stalls, %d paced writes, %d flushes; want none", m.Stall.Count, m.Pace.Count, m.Flush.Count)
	}

	// A write is held at the pace, before the new memtable takes more
	// than its runway, with exactly the threshold's memtables waiting for
	// a flush, and goes on once the flushes do.
	write(func(m Metrics) bool { return m.Flush.Count > 0 && m.Pace.Duration > 0 })
	for deadline := time.Now().Add(10 * time.Second); db.Metrics().Pace.Count == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a writer past the threshold was never held")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the writer past the threshold went on with every flush held (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	db.mu.Lock()
	queued, reserved, capacity := len(db.mem.queue), db.mem.mutable.reserved.Load(), db.mem.mutable.Capacity()
	db.mu.Unlock()
	// The memtable holds its runway, and no more than a write past it.
	runway := int64(float64(capacity) * paceRunway)
	if queued != opts.MemTableStopWritesThreshold || reserved < runway-int64(2*len(value)) || reserved > runway+int64(2*len(value)) {
		t.Fatalf("held with %d memtables waiting for a flush and %d bytes in the mutable one; want the threshold, %d, and its runway, %d bytes",
			queued, reserved, opts.MemTableStopWritesThreshold, runway)
	}
	open()
	wait("after the flushes were let through")
	// (A stall may follow: the first flush has no finishing time for the
	// pace to expect, and the memtable may fill before it is installed.)
	if m := db.Metrics(); m.Pace.Duration < 50*time.Millisecond {
		t.Fatalf("after the flushes ran: paced writes waited %v, want over 50 ms", m.Pace.Duration)
	}
	for _, k := range []int{0, n / 2, n} {
		if got := mustGet(t, db, fmt.Sprintf("k%08d", k)); got != value {
			t.Fatalf("key %d: %d bytes", k, len(got))
		}
	}
}
