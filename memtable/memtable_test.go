package memtable

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// entry is one key/value pair of the sorted model the tests compare against.
type entry struct {
	key   base.InternalKey
	value []byte
}

func (e entry) String() string { return fmt.Sprintf("%s=%q", e.key, e.value) }

// model is the reference: every entry added, kept sorted by InternalCompare.
type model []entry

func (md model) sorted() model {
	out := slices.Clone(md)
	slices.SortFunc(out, func(a, b entry) int { return base.InternalCompare(a.key, b.key) })
	return out
}

// within returns the entries whose user key lies in [lower, upper).
func (md model) within(lower, upper []byte) model {
	var out model
	for _, e := range md {
		if lower != nil && bytes.Compare(e.key.UserKey, lower) < 0 {
			continue
		}
		if upper != nil && bytes.Compare(e.key.UserKey, upper) >= 0 {
			continue
		}
		out = append(out, e)
	}
	return out
}

// get is Get on the sorted model.
func (md model) get(userKey []byte, seq base.SeqNum) (entry, bool) {
	for _, e := range md {
		if bytes.Equal(e.key.UserKey, userKey) && e.key.SeqNum() <= seq {
			return e, true
		}
	}
	return entry{}, false
}

// randomKey draws from a small alphabet so that user keys repeat (several
// versions) and some are prefixes of others; the empty key is included.
func randomKey(rng *rand.Rand, n int) []byte {
	k := make([]byte, rng.IntN(n+1))
	for i := range k {
		k[i] = "abc"[rng.IntN(3)]
	}
	return k
}

// fill adds n random entries with distinct sequence numbers in random order.
func fill(t testing.TB, rng *rand.Rand, m *MemTable, n int) model {
	t.Helper()
	seqs := rng.Perm(n)
	var md model
	for i := range n {
		kind := base.KindSet
		if rng.IntN(5) == 0 {
			kind = base.KindDelete
		}
		key := base.MakeInternalKey(randomKey(rng, 4), base.SeqNum(seqs[i]+1), kind)
		value := []byte(fmt.Sprintf("v%d", seqs[i]+1))
		if rng.IntN(10) == 0 {
			value = nil
		}
		if err := m.Add(key, value); err != nil {
			t.Fatalf("Add(%s): %v", key, err)
		}
		md = append(md, entry{key.Clone(), value})
	}
	return md.sorted()
}

func sameEntry(it base.InternalIterator, e entry) bool {
	k := it.Key()
	return bytes.Equal(k.UserKey, e.key.UserKey) && k.Trailer == e.key.Trailer && bytes.Equal(it.Value(), e.value)
}

func TestAgainstModel(t *testing.T) {
	for _, n := range []int{0, 1, 2, 10, 300, 3000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			m := New(1 << 20)
			checkAgainstModel(t, rng, m, fill(t, rng, m, n))
		})
	}
}

// TestOffHeap checks a memtable whose arena is mapped outside the Go heap
// against the model, and that a use after Release fails loudly instead of
// reading memory that is gone.
func TestOffHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{0, 1, 300, 3000} {
		m := NewOffHeap(1 << 20)
		checkAgainstModel(t, rng, m, fill(t, rng, m, n))
		m.Release()
	}
	m := NewOffHeap(1 << 20)
	if err := m.Add(base.MakeInternalKey([]byte("k"), 1, base.KindSet), []byte("v")); err != nil {
		t.Fatal(err)
	}
	m.Release()
	defer func() {
		if recover() == nil {
			t.Fatal("Get after Release did not panic")
		}
	}()
	m.Get([]byte("k"), 1)
}

// checkAgainstModel checks m, holding what fill recorded in md, against md:
// its invariants, scans both ways, Get at every interesting sequence number
// and random iterator walks.
func checkAgainstModel(t *testing.T, rng *rand.Rand, m *MemTable, md model) {
	t.Helper()
	n := len(md)
	checkInvariants(t, m)
	if m.Empty() != (n == 0) {
		t.Fatalf("Empty() = %v with %d entries", m.Empty(), n)
	}
	// Full scans, both directions.
	it := m.NewIter(nil, nil)
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i >= len(md) || !sameEntry(it, md[i]) {
			t.Fatalf("forward %d: got %s, want %v", i, it.Key(), md[i:min(i+1, len(md))])
		}
		i++
	}
	if i != len(md) {
		t.Fatalf("forward scan saw %d entries, want %d", i, len(md))
	}
	i = len(md) - 1
	for ok := it.Last(); ok; ok = it.Prev() {
		if i < 0 || !sameEntry(it, md[i]) {
			t.Fatalf("reverse %d: got %s", i, it.Key())
		}
		i--
	}
	if i != -1 {
		t.Fatalf("reverse scan stopped at %d", i)
	}

	// Get every user key (and some that are absent) at every
	// sequence number where its answer can change: each
	// version's, the ones around it, and the extremes.
	versions := map[string]model{}
	for _, e := range md {
		versions[string(e.key.UserKey)] = append(versions[string(e.key.UserKey)], e)
	}
	for range 20 {
		if uk := string(randomKey(rng, 6)); versions[uk] == nil {
			versions[uk] = model{}
		}
	}
	for uk, vs := range versions {
		seqs := []base.SeqNum{0, base.SeqNumMax}
		for _, e := range vs {
			seqs = append(seqs, e.key.SeqNum()-1, e.key.SeqNum(), e.key.SeqNum()+1)
		}
		for _, seq := range seqs {
			want, wantOK := vs.get([]byte(uk), seq)
			v, kind, ok := m.Get([]byte(uk), seq)
			if ok != wantOK || (ok && (kind != want.key.Kind() || !bytes.Equal(v, want.value))) {
				t.Fatalf("Get(%q, %d) = %q, %s, %v; want %v, %v", uk, seq, v, kind, ok, want, wantOK)
			}
		}
	}
	if _, _, ok := m.Get([]byte("a"), base.SeqNumMax+1); ok != (len(md.within([]byte("a"), []byte("a\x00"))) > 0) {
		t.Fatalf("Get above SeqNumMax: found = %v", ok)
	}

	// Random walks with random bounds.
	for range 100 {
		lower, upper := randomBounds(rng)
		walk(t, rng, m.NewIter(lower, upper), md.within(lower, upper), 200)
	}
}

func randomBounds(rng *rand.Rand) (lower, upper []byte) {
	if rng.IntN(3) > 0 {
		lower = randomKey(rng, 3)
	}
	if rng.IntN(3) > 0 {
		upper = randomKey(rng, 3)
	}
	return lower, upper
}

// walk applies random positioning calls to it and to a model iterator over
// want (the entries within its bounds) and checks they agree. The model
// position pos is -1 when exhausted at the front and len(want) at the back;
// an exhausted iterator turns around (Next from the front is First, Prev
// from the back is Last).
func walk(t *testing.T, rng *rand.Rand, it base.InternalIterator, want model, steps int) {
	t.Helper()
	defer func() {
		if err := it.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}()
	pos := -1
	var trace []string
	for range steps {
		var ok bool
		switch op := rng.IntN(6); op {
		case 0:
			key := randomKey(rng, 4)
			trace = append(trace, fmt.Sprintf("SeekGE(%q)", key))
			ok = it.SeekGE(key)
			pos = len(want)
			for i, e := range want {
				if bytes.Compare(e.key.UserKey, key) >= 0 {
					pos = i
					break
				}
			}
		case 1:
			key := randomKey(rng, 4)
			trace = append(trace, fmt.Sprintf("SeekLT(%q)", key))
			ok = it.SeekLT(key)
			pos = -1
			for i, e := range want {
				if bytes.Compare(e.key.UserKey, key) < 0 {
					pos = i
				}
			}
		case 2:
			trace = append(trace, "First")
			ok, pos = it.First(), 0
		case 3:
			trace = append(trace, "Last")
			ok, pos = it.Last(), len(want)-1
		case 4:
			trace = append(trace, "Next")
			ok = it.Next()
			if pos < len(want) {
				pos++
			}
		case 5:
			trace = append(trace, "Prev")
			ok = it.Prev()
			if pos >= 0 {
				pos--
			}
		}
		if pos < 0 || pos >= len(want) {
			// With no entry at all both ends coincide and every call
			// fails, whatever the model position.
			pos = min(max(pos, -1), len(want))
			if ok {
				t.Fatalf("%v: at %s, want exhausted", trace, it.Key())
			}
			continue
		}
		if !ok || !sameEntry(it, want[pos]) {
			got := "exhausted"
			if ok {
				got = it.Key().String()
			}
			t.Fatalf("%v: at %s, want %s", trace, got, want[pos])
		}
	}
	if it.Error() != nil {
		t.Fatalf("Error: %v", it.Error())
	}
}

// checkInvariants walks every level of a quiescent memtable and checks the
// package invariants: levels sorted, each a subset of the one below, and
// back-links exact.
func checkInvariants(t *testing.T, m *MemTable) {
	t.Helper()
	checkLevels(t, m, true)
}

// checkLevels is checkInvariants, with back-links that only have to point
// before their node when exactBackLinks is false: after concurrent
// writers, two updates of one back-link may have crossed (invariant 4).
func checkLevels(t *testing.T, m *MemTable, exactBackLinks bool) {
	t.Helper()
	a := m.arena
	below := map[uint32]bool{}
	for level := range maxHeight {
		here := map[uint32]bool{}
		prev := headOffset
		for off := a.next(headOffset, level).Load(); off != tailOffset; off = a.next(off, level).Load() {
			nd := a.node(off)
			if level == 0 {
				if back := nd.prev.Load(); back != prev && (exactBackLinks || back != headOffset && !below[back]) {
					t.Fatalf("back-link of %d is %d, want %d", off, back, prev)
				}
				below[off] = true
			}
			if level > 0 && !below[off] {
				t.Fatalf("node %d at level %d is missing from level %d", off, level, level-1)
			}
			if level >= int(nd.height) || level >= int(m.height.Load()) {
				t.Fatalf("node %d at level %d, above height %d", off, level, m.height.Load())
			}
			if prev != headOffset {
				pk := base.InternalKey{UserKey: a.key(prev, a.node(prev)), Trailer: a.node(prev).trailer}
				k := base.InternalKey{UserKey: a.key(off, nd), Trailer: nd.trailer}
				if base.InternalCompare(pk, k) >= 0 {
					t.Fatalf("level %d out of order: %s then %s", level, pk, k)
				}
			}
			here[off] = true
			prev = off
		}
		if back := a.node(tailOffset).prev.Load(); level == 0 && back != prev && (exactBackLinks || back != headOffset && !below[back]) {
			t.Fatalf("tail back-link is %d, want %d", back, prev)
		}
		below = here
	}
}

func TestEmpty(t *testing.T) {
	for _, size := range []int{0, 1, 1 << 10} {
		m := New(size)
		if !m.Empty() || m.Size() != 0 || m.Available() != size {
			t.Fatalf("New(%d): Empty %v Size %d Available %d", size, m.Empty(), m.Size(), m.Available())
		}
		if _, _, ok := m.Get(nil, base.SeqNumMax); ok {
			t.Fatalf("Get on empty memtable found something")
		}
		it := m.NewIter(nil, nil)
		for name, f := range map[string]func() bool{
			"First": it.First, "Last": it.Last, "Next": it.Next, "Prev": it.Prev,
			"SeekGE": func() bool { return it.SeekGE(nil) },
			"SeekLT": func() bool { return it.SeekLT([]byte("z")) },
		} {
			if f() {
				t.Fatalf("%s on empty memtable returned true", name)
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, m)
	}
}

func TestNewPanicsOnBadSize(t *testing.T) {
	sizes := []int{-1}
	if tooBig := uint64(MaxArenaSize) + 1; tooBig <= math.MaxInt {
		sizes = append(sizes, int(tooBig))
	}
	for _, size := range sizes {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%d) did not panic", size)
				}
			}()
			New(size)
		}()
	}
}

func TestEmptyKeysAndValues(t *testing.T) {
	m := New(1 << 10)
	add := func(k string, seq base.SeqNum, kind base.Kind, v []byte) {
		t.Helper()
		if err := m.Add(base.MakeInternalKey([]byte(k), seq, kind), v); err != nil {
			t.Fatal(err)
		}
	}
	add("", 1, base.KindSet, []byte("one"))
	add("", 2, base.KindSet, nil)
	add("", 3, base.KindDelete, nil)
	add("a", 4, base.KindSet, []byte{})

	for seq, want := range map[base.SeqNum]struct {
		v    string
		kind base.Kind
		ok   bool
	}{0: {}, 1: {"one", base.KindSet, true}, 2: {"", base.KindSet, true}, 3: {"", base.KindDelete, true}, 9: {"", base.KindDelete, true}} {
		v, kind, ok := m.Get([]byte{}, seq)
		if ok != want.ok || kind != want.kind || string(v) != want.v {
			t.Errorf("Get(\"\", %d) = %q, %s, %v; want %+v", seq, v, kind, ok, want)
		}
	}
	if v, _, ok := m.Get(nil, 9); !ok || v == nil || len(v) != 0 || cap(v) != 0 {
		t.Errorf("empty value: got %q (cap %d), %v", v, cap(v), ok)
	}

	it := m.NewIter(nil, []byte("a"))
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, fmt.Sprintf("%s=%q", it.Key(), it.Value()))
	}
	want := []string{`""#3,DEL=""`, `""#2,SET=""`, `""#1,SET="one"`}
	if !slices.Equal(got, want) {
		t.Errorf("scan [nil, a): %v, want %v", got, want)
	}
	// An empty lower bound is a bound, not "open": it still admits "".
	it = m.NewIter([]byte{}, nil)
	if !it.Last() || string(it.Key().UserKey) != "a" || !it.SeekLT([]byte("a")) || it.Key().SeqNum() != 1 {
		t.Errorf("bounded iteration over empty keys misplaced")
	}
	checkInvariants(t, m)
}

// TestKeyAndValueDoNotAliasCaller checks that Add copies, and that slices
// handed out cannot be appended into the arena.
func TestKeyAndValueDoNotAliasCaller(t *testing.T) {
	m := New(1 << 10)
	k, v := []byte("key"), []byte("value")
	if err := m.Add(base.MakeInternalKey(k, 1, base.KindSet), v); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(base.MakeInternalKey([]byte("key2"), 2, base.KindSet), []byte("value2")); err != nil {
		t.Fatal(err)
	}
	copy(k, "XXX")
	copy(v, "XXXXX")
	got, _, ok := m.Get([]byte("key"), 1)
	if !ok || string(got) != "value" {
		t.Fatalf("Get after caller reused its buffers: %q, %v", got, ok)
	}
	_ = append(got, "!!!!!!!!!!!!!!!!"...)
	it := m.NewIter(nil, nil)
	it.First()
	_ = append(it.Key().UserKey, "!!!!!!!!!!!!!!!!"...)
	if it.Next(); string(it.Key().UserKey) != "key2" || string(it.Value()) != "value2" {
		t.Fatalf("appending to a returned slice corrupted the arena: %s=%q", it.Key(), it.Value())
	}
}

// TestArenaFull is the property test of ErrArenaFull and EntrySize: an entry
// whose EntrySize fits is always accepted and uses at most EntrySize bytes;
// a refused entry leaves the memtable unchanged; Size+Available is constant.
func TestArenaFull(t *testing.T) {
	for trial := range 200 {
		rng := rand.New(rand.NewPCG(uint64(trial), 2))
		size := rng.IntN(4 << 10)
		m := New(size)
		var md model
		refusals := 0
		for seq := base.SeqNum(1); refusals < 20; seq++ {
			key := base.MakeInternalKey(randomKey(rng, 40), seq, base.KindSet)
			value := make([]byte, rng.IntN(300))
			before, avail := m.Size(), m.Available()
			fits := EntrySize(len(key.UserKey), len(value)) <= avail
			err := m.Add(key, value)
			if m.Size()+m.Available() != size {
				t.Fatalf("Size %d + Available %d != %d", m.Size(), m.Available(), size)
			}
			switch {
			case err == nil:
				if used := m.Size() - before; used > EntrySize(len(key.UserKey), len(value)) || used <= 0 {
					t.Fatalf("Add used %d bytes, EntrySize says at most %d", used, EntrySize(len(key.UserKey), len(value)))
				}
				md = append(md, entry{key, value})
			case errors.Is(err, ErrArenaFull):
				refusals++
				if fits {
					t.Fatalf("Add refused an entry of EntrySize %d with %d available", EntrySize(len(key.UserKey), len(value)), avail)
				}
				if m.Size() != before {
					t.Fatalf("refused Add changed Size from %d to %d", before, m.Size())
				}
				if _, _, ok := m.Get(key.UserKey, seq); ok && len(md.sorted().within(key.UserKey, append(slices.Clone(key.UserKey), 0))) == 0 {
					t.Fatalf("refused key %s is visible", key)
				}
			default:
				t.Fatalf("Add: %v", err)
			}
		}
		sorted := md.sorted()
		if m.Empty() != (len(md) == 0) {
			t.Fatalf("Empty() = %v with %d entries", m.Empty(), len(md))
		}
		it := m.NewIter(nil, nil)
		i := 0
		for ok := it.First(); ok; ok = it.Next() {
			if i >= len(sorted) || !sameEntry(it, sorted[i]) {
				t.Fatalf("entry %d: got %s", i, it.Key())
			}
			i++
		}
		if i != len(sorted) {
			t.Fatalf("saw %d entries, want %d", i, len(sorted))
		}
		checkInvariants(t, m)
	}
}

// TestHugeEntryRefused checks that lengths beyond the 32-bit offsets neither
// overflow the size computation nor get allocated. (It checks the arithmetic
// directly rather than through Add, to avoid allocating a 4 GiB value.)
func TestHugeEntryRefused(t *testing.T) {
	m := New(1 << 10)
	n := nodeSize(1, math.MaxInt32, math.MaxInt32)
	if n < 2*math.MaxInt32 {
		t.Fatalf("nodeSize overflowed: %d", n)
	}
	if _, ok := m.arena.alloc(n); ok {
		t.Fatalf("allocated a 4 GiB entry")
	}
	if EntrySize(1<<20, 1<<30) < 1<<20+1<<30 {
		t.Fatalf("EntrySize below the entry's length")
	}
	if !m.Empty() || m.Size() != 0 {
		t.Fatalf("refused allocation changed the memtable")
	}
}

// TestSequentialAdds exercises the cached splice: ascending, descending and
// interleaved runs must all produce a well-formed list.
func TestSequentialAdds(t *testing.T) {
	m := New(1 << 20)
	var md model
	seq := base.SeqNum(0)
	add := func(k string) {
		seq++
		key := base.MakeInternalKey([]byte(k), seq, base.KindSet)
		if err := m.Add(key, []byte(k)); err != nil {
			t.Fatal(err)
		}
		md = append(md, entry{key, []byte(k)})
	}
	for i := range 1000 {
		add(fmt.Sprintf("asc%05d", i))
	}
	for i := 1000; i > 0; i-- {
		add(fmt.Sprintf("desc%05d", i))
	}
	for i := range 1000 {
		add(fmt.Sprintf("asc%05d", i)) // newer versions sort before the old
		add(fmt.Sprintf("asc%05d-", i))
	}
	checkInvariants(t, m)
	want := md.sorted()
	it := m.NewIter(nil, nil)
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if !sameEntry(it, want[i]) {
			t.Fatalf("entry %d: got %s, want %s", i, it.Key(), want[i])
		}
		i++
	}
	if i != len(want) {
		t.Fatalf("saw %d entries, want %d", i, len(want))
	}
}

func TestRandomHeightDistribution(t *testing.T) {
	rng := uint64(0x9e3779b97f4a7c15)
	var counts [maxHeight + 1]int
	const n = 1 << 20
	for range n {
		h := randomHeight(&rng)
		if h < 1 || h > maxHeight {
			t.Fatalf("height %d out of range", h)
		}
		counts[h]++
	}
	// P(height = h) = (3/4) 4^-(h-1); check the first few within 5%.
	want := 0.75 * n
	for h := 1; h <= 4; h++ {
		if got := float64(counts[h]); got < want*0.95 || got > want*1.05 {
			t.Errorf("height %d drawn %d times, want about %.0f", h, counts[h], want)
		}
		want /= 4
	}
}

// TestPrevWithLaggingBackLink reproduces deterministically what a reader sees
// when the writer has linked nodes but not yet updated their successor's
// back-link: Prev must still return the immediate predecessor.
func TestPrevWithLaggingBackLink(t *testing.T) {
	m := New(1 << 10)
	for i, k := range []string{"a", "b", "c", "d"} {
		if err := m.Add(base.MakeInternalKey([]byte(k), base.SeqNum(i+1), base.KindSet), nil); err != nil {
			t.Fatal(err)
		}
	}
	a := m.arena
	first := a.next(headOffset, 0).Load()
	last := a.node(tailOffset).prev.Load()
	// Point "d" back at "a" (skipping "b" and "c") and the tail at the
	// head (skipping everything), as if the back-link stores lagged.
	a.node(last).prev.Store(first)
	a.node(tailOffset).prev.Store(headOffset)

	it := m.NewIter(nil, nil)
	var got []string
	for ok := it.Last(); ok; ok = it.Prev() {
		got = append(got, string(it.Key().UserKey))
	}
	if want := []string{"d", "c", "b", "a"}; !slices.Equal(got, want) {
		t.Fatalf("reverse scan with lagging back-links: %v, want %v", got, want)
	}
}
