package memtable

import (
	"testing"
	"time"
)

// TestPopulatorLead checks that a populator keeps an arena's pages faulted
// in ahead of its writers by the lead its size allows, not more: a small
// arena, as a DB's first memtables are, gets an eighth of its size, a
// large one two huge pages; and that it follows the writers.
func TestPopulatorLead(t *testing.T) {
	for _, size := range []int{256 << 10, 8 << 20, 64 << 20} {
		a := newArena(size, true)
		if a.populator == nil {
			t.Fatal("an arena outside the heap has no populator")
		}
		lead := populatorLead(uint64(len(a.buf)))
		// The writers wake the populator once they come within half
		// its lead of the populated pages, and it then populates a lead
		// past them: at rest it is between half a lead and two leads
		// ahead (a lead past the writers' offset when it woke, plus
		// whole pages).
		settle := func(used uint64) {
			t.Helper()
			end := uint64(len(a.buf))
			low, high := min(used+lead/2, end), min(used+2*lead, end)
			deadline := time.Now().Add(5 * time.Second)
			for a.populator.ahead.Load() < low && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if got := a.populator.ahead.Load(); got < low || got > high {
				t.Fatalf("arena of %d bytes, %d used: populated up to %d, want %d to %d", size, used, got, low, high)
			}
		}
		settle(a.used.Load())
		for a.available() > 3*size/4 {
			if _, ok := a.alloc(4 << 10); !ok {
				t.Fatal("alloc failed with room left")
			}
		}
		settle(a.used.Load())
		a.release()
	}
}
