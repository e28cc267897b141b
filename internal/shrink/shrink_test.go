package shrink

import "testing"

// TestMap: a map is made again only once it fell to a quarter of a peak
// past From, with every entry kept, and the peak starts again from there.
func TestMap(t *testing.T) {
	m := map[int]int{}
	peak := 0
	for i := range 4 * From {
		m[i] = i
	}
	m = Map(m, &peak)
	if peak != 4*From {
		t.Fatalf("peak %d, want %d", peak, 4*From)
	}
	for i := range 3 * From {
		delete(m, i)
	}
	same := Map(m, &peak) // exactly a quarter: kept
	same[-1] = -1
	if _, ok := m[-1]; !ok {
		t.Fatal("a map at a quarter of its peak was made again")
	}
	delete(m, -1)
	delete(m, 3*From)
	out := Map(m, &peak)
	out[-2] = -2
	if _, ok := m[-2]; ok {
		t.Fatal("a map below a quarter of its peak was not made again")
	}
	if len(out) != From || peak != From-1 {
		t.Fatalf("made again with %d entries, peak %d; want %d, %d", len(out), peak, From, From-1)
	}
	for i := 3*From + 1; i < 4*From; i++ {
		if out[i] != i {
			t.Fatalf("entry %d lost", i)
		}
	}

	small, p := map[int]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5}, 0
	Map(small, &p)
	for i := 1; i <= 4; i++ {
		delete(small, i)
	}
	if got := Map(small, &p); got[5] != 5 {
		t.Fatal("a small map lost its entry")
	} else if got[9] = 9; small[9] != 9 {
		t.Fatal("a map whose peak was below From was made again")
	}
}
