package memtable

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// concurrentValue is the value written under (userKey, seq): it depends on
// both, so a reader that sees a key with the wrong value, or a value cut
// short, has seen a half-built entry. Deletions carry no value.
func concurrentValue(userKey []byte, seq base.SeqNum, kind base.Kind) []byte {
	if kind == base.KindDelete {
		return nil
	}
	v := fmt.Appendf(nil, "%s@%d:", userKey, seq)
	for i := range int(seq % 40) {
		v = append(v, byte(seq)+byte(i))
	}
	return v
}

// concurrentKeys returns n user keys drawn from a pool of n/4, so that
// keys repeat and have several versions. With runs, only every fourth is
// drawn, and each of the three after it extends its predecessor by an "x":
// runs of ascending keys.
func concurrentKeys(rng *rand.Rand, n int, runs bool) [][]byte {
	pool := make([][]byte, n/4)
	for i := range pool {
		pool[i] = fmt.Appendf(nil, "%0*x", 4+rng.IntN(20), rng.Uint64())
	}
	keys := make([][]byte, n)
	for i := range keys {
		if runs && i%4 != 0 {
			keys[i] = append(slices.Clone(keys[i-1]), 'x')
			continue
		}
		keys[i] = pool[rng.IntN(len(pool))]
	}
	return keys
}

func concurrentKind(seq base.SeqNum) base.Kind {
	if seq%7 == 0 {
		return base.KindDelete
	}
	return base.KindSet
}

// TestConcurrentReaders runs one writer and several readers. Readers scan in
// both directions, turn around mid-scan, seek and Get while the writer
// inserts, and check that what they see is sorted, complete (every entry
// published before a read began is found) and never half-built. Run it with
// -race: it is also what shows that the atomic publication is sufficient.
func TestConcurrentReaders(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 5000
	}
	// The writer inserts keys[i] at sequence number i+1. User keys repeat
	// (a pool of n/4), so there are multi-version keys, and keys are
	// generated before the writer starts so that readers can look them up
	// without synchronization.
	keys := concurrentKeys(rand.New(rand.NewPCG(7, 7)), n, false)

	m := New(64 << 20)
	var published atomic.Int64 // entries keys[:published] are in m
	var done atomic.Bool
	var wg sync.WaitGroup

	wg.Go(func() {
		defer done.Store(true)
		for i, uk := range keys {
			seq := base.SeqNum(i + 1)
			kind := concurrentKind(seq)
			if err := m.Add(base.MakeInternalKey(uk, seq, kind), concurrentValue(uk, seq, kind)); err != nil {
				t.Errorf("Add: %v", err)
				return
			}
			published.Store(int64(i + 1))
		}
	})

	const readers = 4
	for r := range readers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 99))
			for last := false; !last; {
				last = done.Load() // one full round after the writer ends
				if err := concurrentRound(m, rng, keys, &published); err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	checkInvariants(t, m)
}

// checkEntry verifies that the iterator's current entry is whole.
func checkEntry(it base.InternalIterator) error {
	k := it.Key()
	if want := concurrentValue(k.UserKey, k.SeqNum(), k.Kind()); !bytes.Equal(it.Value(), want) || k.Kind() != concurrentKind(k.SeqNum()) {
		return fmt.Errorf("entry %s has value %q, want %q", k, it.Value(), want)
	}
	return nil
}

// concurrentRound does one of each kind of read.
func concurrentRound(m *MemTable, rng *rand.Rand, keys [][]byte, published *atomic.Int64) error {
	// Full scans: strictly ordered, whole entries, at least everything
	// published before the scan started.
	for _, reverse := range []bool{false, true} {
		before := int(published.Load())
		it := m.NewIter(nil, nil)
		start, step := it.First, it.Next
		if reverse {
			start, step = it.Last, it.Prev
		}
		count := 0
		var prev base.InternalKey
		var prevBuf []byte
		for ok := start(); ok; ok = step() {
			k := it.Key()
			if count > 0 {
				c := base.InternalCompare(prev, k)
				if (!reverse && c >= 0) || (reverse && c <= 0) {
					return fmt.Errorf("reverse=%v: %s then %s", reverse, prev, k)
				}
			}
			if err := checkEntry(it); err != nil {
				return err
			}
			prevBuf = append(prevBuf[:0], k.UserKey...)
			prev = base.InternalKey{UserKey: prevBuf, Trailer: k.Trailer}
			count++
		}
		if count < before {
			return fmt.Errorf("reverse=%v: scan saw %d entries, %d were published before it", reverse, count, before)
		}
	}

	pub := int(published.Load())
	if pub == 0 {
		return nil
	}
	for range 200 {
		i := rng.IntN(pub)
		uk, seq := keys[i], base.SeqNum(i+1)

		// Every version up to seq is published, and keys[i] is the
		// newest of them, so the answer is exact.
		v, kind, ok := m.Get(uk, seq)
		if !ok || kind != concurrentKind(seq) || !bytes.Equal(v, concurrentValue(uk, seq, kind)) {
			return fmt.Errorf("Get(%q, %d) = %q, %s, %v", uk, seq, v, kind, ok)
		}

		// The newest version overall may be newer than anything
		// published, but is at least seq and whole.
		it := m.NewIter(nil, nil)
		if !it.SeekGE(uk) || !bytes.Equal(it.Key().UserKey, uk) || it.Key().SeqNum() < seq {
			return fmt.Errorf("SeekGE(%q) did not find version %d or newer", uk, seq)
		}
		if err := checkEntry(it); err != nil {
			return err
		}

		// Step forward then back: Prev must return to an entry at or
		// after the one left (one inserted in between is fine) and
		// before the current one.
		left := it.Key().Clone()
		if it.Next() {
			cur := it.Key().Clone()
			if !it.Prev() {
				return fmt.Errorf("Prev from %s failed", cur)
			}
			if k := it.Key(); base.InternalCompare(k, left) < 0 || base.InternalCompare(k, cur) >= 0 {
				return fmt.Errorf("Next from %s to %s, then Prev to %s", left, cur, k)
			}
			if err := checkEntry(it); err != nil {
				return err
			}
		}

		if it.SeekLT(uk) {
			if bytes.Compare(it.Key().UserKey, uk) >= 0 {
				return fmt.Errorf("SeekLT(%q) landed on %s", uk, it.Key())
			}
			if err := checkEntry(it); err != nil {
				return err
			}
		}

		// A bounded reverse scan from the key stays inside its bounds.
		lower := keys[rng.IntN(pub)]
		bit := m.NewIter(lower, uk)
		for ok := bit.Last(); ok; ok = bit.Prev() {
			k := bit.Key().UserKey
			if bytes.Compare(k, lower) < 0 || bytes.Compare(k, uk) >= 0 {
				return fmt.Errorf("bounded [%q, %q) scan yielded %q", lower, uk, k)
			}
			if rng.IntN(8) == 0 {
				break
			}
		}
	}
	return nil
}

// TestConcurrentWriters runs several writers inserting at once, beside
// readers. Writers take the next key from a shared counter and insert it
// (one through Add, the others through Inserters they renew every few
// inserts, so that stale splices are exercised); a key counts as published
// once it and every key before it are in, as the engine publishes batches.
// Readers check what concurrentRound checks; at the end every level is
// checked, and every key is found. Run it with -race.
func TestConcurrentWriters(t *testing.T) {
	n := 40000
	if testing.Short() {
		n = 8000
	}
	// Runs of ascending keys, as a sorted batch has, land inside an
	// Inserter's splice while other writers link nodes into it.
	keys := concurrentKeys(rand.New(rand.NewPCG(8, 8)), n, true)

	m := New(64 << 20)
	var claimed, published atomic.Int64
	inserted := make([]atomic.Bool, n)
	var done atomic.Int32
	var wg sync.WaitGroup
	const writers = 4
	for w := range writers {
		wg.Go(func() {
			defer done.Add(1)
			var ins Inserter
			for count := 0; ; count++ {
				i := int(claimed.Add(1) - 1)
				if i >= n {
					return
				}
				uk, seq := keys[i], base.SeqNum(i+1)
				kind := concurrentKind(seq)
				key, value := base.MakeInternalKey(uk, seq, kind), concurrentValue(uk, seq, kind)
				var err error
				if w == 0 {
					err = m.Add(key, value)
				} else {
					if count%5 == 0 {
						ins = Inserter{}
					}
					var size int
					size, err = m.Insert(&ins, key, value)
					if err == nil && (size <= 0 || size > EntrySize(len(uk), len(value))) {
						err = fmt.Errorf("Insert took %d bytes, EntrySize says at most %d", size, EntrySize(len(uk), len(value)))
					}
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				inserted[i].Store(true)
				for p := published.Load(); p < int64(n) && inserted[p].Load(); p = published.Load() {
					published.CompareAndSwap(p, p+1)
				}
			}
		})
	}
	const readers = 2
	for r := range readers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 98))
			for last := false; !last; {
				last = done.Load() == writers
				if err := concurrentRound(m, rng, keys, &published); err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if p := published.Load(); p != int64(n) {
		t.Fatalf("published %d of %d", p, n)
	}
	checkLevels(t, m, false)
	for i, uk := range keys {
		seq := base.SeqNum(i + 1)
		if v, kind, ok := m.Get(uk, seq); !ok || kind != concurrentKind(seq) || !bytes.Equal(v, concurrentValue(uk, seq, kind)) {
			t.Fatalf("Get(%q, %d) = %q, %s, %v", uk, seq, v, kind, ok)
		}
	}
}
