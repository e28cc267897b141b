package sstable

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// modelIter is the reference iterator: a position in the sorted slice of
// entries within bounds, -1 before the start and len after the end.
type modelIter struct {
	entries []kv
	pos     int
}

func (m *modelIter) valid() bool { return m.pos >= 0 && m.pos < len(m.entries) }

func (m *modelIter) seekGE(k []byte) bool {
	m.pos = sort.Search(len(m.entries), func(i int) bool { return bytes.Compare(m.entries[i].key.UserKey, k) >= 0 })
	return m.valid()
}

func (m *modelIter) seekLT(k []byte) bool {
	m.pos = sort.Search(len(m.entries), func(i int) bool { return bytes.Compare(m.entries[i].key.UserKey, k) >= 0 }) - 1
	return m.valid()
}

func (m *modelIter) first() bool { m.pos = 0; return m.valid() }
func (m *modelIter) last() bool  { m.pos = len(m.entries) - 1; return m.valid() }

func (m *modelIter) next() bool {
	if m.pos < len(m.entries) {
		m.pos++
	}
	return m.valid()
}

func (m *modelIter) prev() bool {
	if m.pos >= 0 {
		m.pos--
	}
	return m.valid()
}

func inBounds(all []kv, lower, upper []byte) []kv {
	var out []kv
	for _, e := range all {
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

// modelGet returns the newest version of uk with seqnum <= seq.
func modelGet(all []kv, uk []byte, seq base.SeqNum) (kv, bool) {
	i := sort.Search(len(all), func(i int) bool { return bytes.Compare(all[i].key.UserKey, uk) >= 0 })
	for ; i < len(all) && bytes.Equal(all[i].key.UserKey, uk); i++ {
		if all[i].key.SeqNum() <= seq {
			return all[i], true
		}
	}
	return kv{}, false
}

// probeKey returns a user key to seek or get: an existing one, a neighbour
// of one, or an arbitrary one (possibly before the first or after the last).
func probeKey(rng *rand.Rand, all []kv) []byte {
	switch n := rng.IntN(10); {
	case n < 4 && len(all) > 0:
		return all[rng.IntN(len(all))].key.UserKey
	case n < 6 && len(all) > 0:
		k := all[rng.IntN(len(all))].key.UserKey
		return append(slices.Clone(k), 0)
	case n < 7 && len(all) > 0:
		k := all[rng.IntN(len(all))].key.UserKey
		return k[:rng.IntN(len(k)+1)]
	case n < 8:
		return []byte{}
	case n < 9:
		return []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
	}
	k := make([]byte, rng.IntN(6))
	for i := range k {
		k[i] = "abcdeXYZ\x00\xff"[rng.IntN(10)]
	}
	return k
}

func checkPos(t *testing.T, desc string, it base.InternalIterator, ok bool, m *modelIter, mok bool) {
	t.Helper()
	if err := it.Error(); err != nil {
		t.Fatalf("%s: error %v", desc, err)
	}
	if ok != mok {
		want := "exhausted"
		if mok {
			want = fmtKV(m.entries[m.pos].key, m.entries[m.pos].value)
		}
		got := "exhausted"
		if ok {
			got = fmtKV(it.Key(), it.Value())
		}
		t.Fatalf("%s: got %s, want %s", desc, got, want)
	}
	if !ok {
		return
	}
	want := m.entries[m.pos]
	if base.InternalCompare(it.Key(), want.key) != 0 || it.Key().Trailer != want.key.Trailer || !bytes.Equal(it.Value(), want.value) {
		t.Fatalf("%s: got %s, want %s", desc, fmtKV(it.Key(), it.Value()), fmtKV(want.key, want.value))
	}
}

func fullScans(t *testing.T, r *Reader, all []kv) {
	t.Helper()
	it := r.NewIter(nil, nil)
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i >= len(all) || base.InternalCompare(it.Key(), all[i].key) != 0 || !bytes.Equal(it.Value(), all[i].value) {
			t.Fatalf("forward scan entry %d: got %s", i, fmtKV(it.Key(), it.Value()))
		}
		i++
	}
	if err := it.Close(); err != nil || i != len(all) {
		t.Fatalf("forward scan: %d of %d entries, err %v", i, len(all), err)
	}
	it = r.NewIter(nil, nil)
	i = len(all) - 1
	for ok := it.Last(); ok; ok = it.Prev() {
		if i < 0 || base.InternalCompare(it.Key(), all[i].key) != 0 || !bytes.Equal(it.Value(), all[i].value) {
			t.Fatalf("reverse scan entry %d: got %s", i, fmtKV(it.Key(), it.Value()))
		}
		i--
	}
	if err := it.Close(); err != nil || i != -1 {
		t.Fatalf("reverse scan stopped at %d, err %v", i, err)
	}
}

func randomOps(t *testing.T, rng *rand.Rand, r *Reader, all []kv) {
	t.Helper()
	for trial := range 12 {
		var lower, upper []byte
		if trial%3 != 0 {
			if rng.IntN(3) > 0 {
				lower = probeKey(rng, all)
			}
			if rng.IntN(3) > 0 {
				upper = probeKey(rng, all)
			}
		}
		m := &modelIter{entries: inBounds(all, lower, upper)}
		it := r.NewIter(lower, upper)
		bounds := fmt.Sprintf("[%q, %q)", lower, upper)
		positioned := false
		for op := range 150 {
			var ok, mok bool
			var desc string
			switch n := rng.IntN(20); {
			case n < 2:
				k := probeKey(rng, all)
				desc = fmt.Sprintf("SeekGE(%q)", k)
				ok, mok = it.SeekGE(k), m.seekGE(k)
			case n < 4:
				k := probeKey(rng, all)
				desc = fmt.Sprintf("SeekLT(%q)", k)
				ok, mok = it.SeekLT(k), m.seekLT(k)
			case n < 5:
				desc = "First"
				ok, mok = it.First(), m.first()
			case n < 6:
				desc = "Last"
				ok, mok = it.Last(), m.last()
			case n < 13:
				if !positioned {
					continue
				}
				desc = "Next"
				ok, mok = it.Next(), m.next()
			default:
				if !positioned {
					continue
				}
				desc = "Prev"
				ok, mok = it.Prev(), m.prev()
			}
			positioned = true
			checkPos(t, fmt.Sprintf("bounds %s op %d %s", bounds, op, desc), it, ok, m, mok)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func randomGets(t *testing.T, rng *rand.Rand, r *Reader, all []kv) {
	t.Helper()
	maxSeq := base.SeqNum(0)
	for _, e := range all {
		maxSeq = max(maxSeq, e.key.SeqNum())
	}
	for range 300 {
		k := probeKey(rng, all)
		seq := base.SeqNum(rng.Uint64N(uint64(maxSeq) + 2))
		if rng.IntN(4) == 0 {
			seq = base.SeqNumMax
		}
		v, found, err := r.Get(k, seq)
		if err != nil {
			t.Fatalf("Get(%q, %d): %v", k, seq, err)
		}
		want, wantFound := modelGet(all, k, seq)
		if found != wantFound || (found && (v.Kind != want.key.Kind() || !bytes.Equal(v.Bytes, want.value))) {
			t.Fatalf("Get(%q, %d) = %q %s %v, want %s %v", k, seq, v.Bytes, v.Kind, found, fmtKV(want.key, want.value), wantFound)
		}
		v.Release()
	}
}

func TestRoundTrip(t *testing.T) {
	compressions := []Compression{DefaultCompression, NoCompression, S2Compression, ZstdCompression}
	blockSizes := []int{64, 512, 4096}
	seed := uint64(1)
	for _, comp := range compressions {
		for _, bs := range blockSizes {
			for _, cached := range []bool{false, true} {
				for _, bloomBits := range []int{-1, 0} {
					seed++
					name := fmt.Sprintf("%s/block=%d/cache=%v/bloom=%d", comp, bs, cached, bloomBits)
					t.Run(name, func(t *testing.T) {
						rng := rand.New(rand.NewPCG(seed, 7))
						n := []int{0, 1, 2, 17, 300, 2000}[rng.IntN(6)]
						all := genEntries(rng, n)
						opts := WriterOptions{
							BlockSize:       bs,
							RestartInterval: []int{0, 1, 2, 5, 16}[rng.IntN(5)],
							Compression:     comp,
							BloomBitsPerKey: bloomBits,
						}
						data, w := buildTable(t, all, opts)
						checkMetadata(t, w, all)
						var ropts ReaderOptions
						if cached {
							ropts.Cache = NewCache(1 << 20)
						}
						ropts.FileNum = 42
						r := openTable(t, data, ropts)
						defer r.Close()
						checkProperties(t, r.Properties(), all, opts)
						fullScans(t, r, all)
						randomOps(t, rng, r, all)
						randomGets(t, rng, r, all)
						if cached && len(all) > 0 {
							// Read everything again, now from the cache.
							fullScans(t, r, all)
							if m := ropts.Cache.Metrics(); m.Hits == 0 || m.Count == 0 {
								t.Fatalf("cache unused: %+v", m)
							}
						}
					})
				}
			}
		}
	}
}

func checkMetadata(t *testing.T, w *Writer, all []kv) {
	t.Helper()
	m := w.Metadata()
	if m.NumEntries != uint64(len(all)) {
		t.Fatalf("Metadata.NumEntries = %d, want %d", m.NumEntries, len(all))
	}
	if len(all) == 0 {
		return
	}
	var dels uint64
	minSeq, maxSeq := base.SeqNumMax, base.SeqNum(0)
	for _, e := range all {
		if e.key.Kind() == base.KindDelete {
			dels++
		}
		minSeq, maxSeq = min(minSeq, e.key.SeqNum()), max(maxSeq, e.key.SeqNum())
	}
	if m.NumDeletions != dels || m.SmallestSeq != minSeq || m.LargestSeq != maxSeq {
		t.Fatalf("Metadata = %+v, want %d deletions, seqs [%d, %d]", m, dels, minSeq, maxSeq)
	}
	if base.InternalCompare(m.Smallest, all[0].key) != 0 || base.InternalCompare(m.Largest, all[len(all)-1].key) != 0 {
		t.Fatalf("Metadata range [%s, %s], want [%s, %s]", m.Smallest, m.Largest, all[0].key, all[len(all)-1].key)
	}
}

func checkProperties(t *testing.T, p Properties, all []kv, opts WriterOptions) {
	t.Helper()
	var rawKey, rawValue, dels uint64
	for _, e := range all {
		rawKey += uint64(e.key.Size())
		rawValue += uint64(len(e.value))
		if e.key.Kind() == base.KindDelete {
			dels++
		}
	}
	if p.NumEntries != uint64(len(all)) || p.NumDeletions != dels || p.RawKeySize != rawKey || p.RawValueSize != rawValue {
		t.Fatalf("properties %+v: want %d entries, %d deletions, %d+%d raw bytes", p, len(all), dels, rawKey, rawValue)
	}
	if p.Compression != opts.Compression {
		t.Fatalf("properties compression %s, want %s", p.Compression, opts.Compression)
	}
	if len(all) > 0 {
		if base.InternalCompare(p.Smallest, all[0].key) != 0 || base.InternalCompare(p.Largest, all[len(all)-1].key) != 0 {
			t.Fatalf("properties range [%s, %s]", p.Smallest, p.Largest)
		}
		if p.NumDataBlocks == 0 || p.DataSize == 0 || p.IndexSize == 0 {
			t.Fatalf("properties sizes %+v", p)
		}
		if hasFilter := opts.BloomBitsPerKey >= 0; hasFilter != (p.FilterSize > 0) {
			t.Fatalf("filter size %d with BloomBitsPerKey %d", p.FilterSize, opts.BloomBitsPerKey)
		}
	}
}

func TestAddOutOfOrder(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{})
	if err := w.Add(base.MakeInternalKey([]byte("b"), 5, base.KindSet), nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range []base.InternalKey{
		base.MakeInternalKey([]byte("b"), 5, base.KindSet), // duplicate
		base.MakeInternalKey([]byte("b"), 6, base.KindSet), // newer version after older
		base.MakeInternalKey([]byte("a"), 1, base.KindSet),
	} {
		w2 := NewWriter(&bytes.Buffer{}, WriterOptions{})
		if err := w2.Add(base.MakeInternalKey([]byte("b"), 5, base.KindSet), nil); err != nil {
			t.Fatal(err)
		}
		if err := w2.Add(k, nil); err == nil {
			t.Errorf("Add(%s) after b#5 succeeded", k)
		}
		if err := w2.Close(); err == nil {
			t.Errorf("Close after a failed Add succeeded")
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(base.MakeInternalKey([]byte("c"), 1, base.KindSet), nil); err == nil {
		t.Fatal("Add after Close succeeded")
	}
}

func TestEmptyTable(t *testing.T) {
	data, w := buildTable(t, nil, WriterOptions{})
	if m := w.Metadata(); m.NumEntries != 0 || m.Size != uint64(len(data)) {
		t.Fatalf("metadata %+v", m)
	}
	r := openTable(t, data, ReaderOptions{})
	defer r.Close()
	it := r.NewIter(nil, nil)
	if it.First() || it.Last() || it.SeekGE([]byte("a")) || it.SeekLT([]byte("a")) {
		t.Fatal("empty table iterator found an entry")
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if _, found, err := r.Get([]byte("a"), base.SeqNumMax); found || err != nil {
		t.Fatalf("Get on empty table: %v %v", found, err)
	}
}

func TestSeparator(t *testing.T) {
	ik := func(s string, seq base.SeqNum) base.InternalKey {
		return base.MakeInternalKey([]byte(s), seq, base.KindSet)
	}
	for _, tc := range []struct {
		a, b base.InternalKey
		want string
	}{
		{ik("abcdef", 1), ik("abz", 1), "abd"},
		{ik("abc", 1), ik("abz", 1), "abc"}, // no shorter separator
		{ik("abc1xyz", 1), ik("abd", 1), "abc2"},
		{ik("abc", 5), ik("abc", 3), "abc"}, // same user key: a itself
		{ik("ab", 1), ik("abc", 1), "ab"},   // prefix: a itself
		{ik("a\xff\xffzz", 1), ik("b", 1), "a\xff\xff{"},
		{ik("abc", 1), ik("abd", 1), "abc"},
	} {
		sep := appendSeparator(nil, tc.a, tc.b)
		k, _ := base.DecodeInternalKey(sep)
		if string(k.UserKey) != tc.want {
			t.Errorf("separator(%s, %s) = %s, want user key %q", tc.a, tc.b, k, tc.want)
		}
		if base.InternalCompare(tc.a, k) > 0 || base.InternalCompare(k, tc.b) >= 0 {
			t.Errorf("separator(%s, %s) = %s not in [a, b)", tc.a, tc.b, k)
		}
	}
}

// countingFile counts the data block reads of a Reader.
type countingFile struct {
	*memFile
	reads int
}

func (f *countingFile) ReadAt(p []byte, off int64) (int, error) {
	f.reads++
	return f.memFile.ReadAt(p, off)
}

func TestBoundsSkipBlocks(t *testing.T) {
	var all []kv
	for i := range 1000 {
		all = append(all, kv{base.MakeInternalKey(fmt.Appendf(nil, "key%05d", i), 1, base.KindSet), bytes.Repeat([]byte{'v'}, 100)})
	}
	data, _ := buildTable(t, all, WriterOptions{Compression: NoCompression})
	f := &countingFile{memFile: newMemFile(data)}
	r, err := NewReader(f, int64(len(data)), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Each block holds about 35 entries: a bound range of 10 keys spans at
	// most 2 blocks.
	for _, reverse := range []bool{false, true} {
		f.reads = 0
		it := r.NewIter([]byte("key00500"), []byte("key00510"))
		n := 0
		if reverse {
			for ok := it.Last(); ok; ok = it.Prev() {
				n++
			}
		} else {
			for ok := it.First(); ok; ok = it.Next() {
				n++
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if n != 10 || f.reads > 2 {
			t.Fatalf("reverse=%v: %d entries with %d block reads, want 10 with <= 2", reverse, n, f.reads)
		}
	}
}

func TestLargeValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	random := make([]byte, 1<<20)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	values := [][]byte{make([]byte, 1<<20), random, []byte("small"), bytes.Repeat([]byte("ab"), 300<<10)}
	for _, comp := range []Compression{NoCompression, S2Compression, ZstdCompression} {
		var all []kv
		for i, v := range values {
			all = append(all, kv{base.MakeInternalKey(fmt.Appendf(nil, "k%d", i), 1, base.KindSet), v})
		}
		data, w := buildTable(t, all, WriterOptions{Compression: comp})
		if p := w.Properties(); p.MaxBlockSize < 1<<20 || p.NumDataBlocks < 3 {
			t.Fatalf("%s: properties %+v", comp, p)
		}
		if comp != NoCompression && len(data) > 1<<20+700<<10 {
			t.Fatalf("%s: %d bytes, compression did not apply", comp, len(data))
		}
		r := openTable(t, data, ReaderOptions{})
		fullScans(t, r, all)
		for _, e := range all {
			v, found, err := r.Get(e.key.UserKey, 1)
			if err != nil || !found || !bytes.Equal(v.Bytes, e.value) {
				t.Fatalf("%s: Get(%s): found %v, err %v", comp, e.key, found, err)
			}
			v.Release()
		}
		r.Close()
	}
}

func TestEstimatedSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	all := genEntries(rng, 5000)
	for _, comp := range []Compression{NoCompression, S2Compression} {
		var buf bytes.Buffer
		w := NewWriter(&buf, WriterOptions{Compression: comp})
		last := uint64(0)
		for _, e := range all {
			if err := w.Add(e.key, e.value); err != nil {
				t.Fatal(err)
			}
			est := w.EstimatedSize()
			if est+est/20 < last {
				t.Fatalf("EstimatedSize went down from %d to %d", last, est)
			}
			last = est
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		actual := float64(buf.Len())
		if d := (float64(last) - actual) / actual; d < -0.1 || d > 0.1 {
			t.Fatalf("%s: estimated %d bytes, wrote %d", comp, last, buf.Len())
		}
	}
}

// TestScratchReuse writes tables one after another through one Scratch, as
// a DB's flushes do: each must be byte for byte the table a Writer of its
// own would write, whatever the tables before it left in the Scratch
// (bigger ones included), and the Scratch must keep the memory it lends.
func TestScratchReuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	sc := new(Scratch)
	for i, n := range []int{300, 2000, 40, 0, 900} {
		entries := genEntries(rng, n)
		for j, split := range []func([]byte) int{nil, func(k []byte) int { return min(2, len(k)) }} {
			opts := WriterOptions{BlockSize: 512, Split: split, Compression: []Compression{DefaultCompression, ZstdCompression}[j]}
			want, _ := buildTable(t, entries, opts)
			opts.Scratch = sc
			got, _ := buildTable(t, entries, opts)
			if !bytes.Equal(got, want) {
				t.Fatalf("table %d (%d entries): written through the scratch it differs from a fresh writer's (%d bytes against %d)", i, n, len(got), len(want))
			}
			if sc.out == nil || (n > 0 && cap(sc.hashes) == 0) {
				t.Fatalf("table %d: the scratch kept no memory (buffer %v, %d hashes of room)", i, sc.out != nil, cap(sc.hashes))
			}
		}
	}
	// A Writer abandoned before Close leaves the Scratch usable.
	entries := genEntries(rng, 500)
	w := NewWriter(io.Discard, WriterOptions{Scratch: sc})
	for _, e := range entries[:250] {
		if err := w.Add(e.key, e.value); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := buildTable(t, entries, WriterOptions{})
	got, _ := buildTable(t, entries, WriterOptions{Scratch: sc})
	if !bytes.Equal(got, want) {
		t.Fatal("after an abandoned writer, a table written through the scratch differs from a fresh writer's")
	}
}
