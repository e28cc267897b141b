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

// TestRotationUnderLoadStallsOnlyAtTheThreshold writes while no flush can
// finish. Rotations that leave fewer than MemTableStopWritesThreshold
// memtables waiting never make a writer wait: the memtables fill, rotate
// and queue with no stall counted. Only the rotation that would pass the
// threshold waits, and it goes on as soon as a flush frees a slot.
func TestRotationUnderLoadStallsOnlyAtTheThreshold(t *testing.T) {
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
			t.Fatalf("%s: the writer is stuck (%d stalls)", what, db.Metrics().Stall.Count)
		}
	}

	// Two rotations: two memtables wait for flushes that cannot finish,
	// and no writer has waited.
	write(func(m Metrics) bool { return m.MemTable.Immutable == opts.MemTableStopWritesThreshold })
	wait("filling to the threshold")
	if m := db.Metrics(); m.Stall.Count != 0 || m.Flush.Count != 0 {
		t.Fatalf("after two rotations with flushes held: %d stalls, %d flushes; want none", m.Stall.Count, m.Flush.Count)
	}

	// The mutable memtable fills too; the next rotation must wait, with
	// exactly the threshold's memtables waiting for a flush, and go on
	// once a flush frees a slot.
	write(func(m Metrics) bool { return m.Stall.Count > 0 })
	for deadline := time.Now().Add(10 * time.Second); db.Metrics().Stall.Count == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a writer past the threshold never stalled")
		}
	}
	if m := db.Metrics(); m.MemTable.Immutable != opts.MemTableStopWritesThreshold {
		t.Fatalf("stalled with %d memtables waiting for a flush, want the threshold, %d", m.MemTable.Immutable, opts.MemTableStopWritesThreshold)
	}
	select {
	case err := <-done:
		t.Fatalf("the writer past the threshold went on with every flush held (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	open()
	wait("after the flushes were let through")
	if m := db.Metrics(); m.Stall.Count != 1 || m.Flush.Count == 0 {
		t.Fatalf("after the flushes ran: %d stalls, %d flushes; want 1 stall and a flush", m.Stall.Count, m.Flush.Count)
	}
	// The stall outlasted the 50 ms above with the flushes held.
	if m := db.Metrics(); m.Stall.Longest < 50*time.Millisecond || m.Stall.Longest > m.Stall.Duration {
		t.Fatalf("one stall of over 50 ms: longest %v, in all %v", m.Stall.Longest, m.Stall.Duration)
	}
	for _, k := range []int{0, n / 2, n} {
		if got := mustGet(t, db, fmt.Sprintf("k%08d", k)); got != value {
			t.Fatalf("key %d: %d bytes", k, len(got))
		}
	}
}
