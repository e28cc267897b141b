package lsm

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

var (
	modelOps      = flag.Int("model-ops", 6000, "operations per randomized model test run")
	modelDuration = flag.Duration("model-duration", 30*time.Second, "time limit per randomized model test run (fsync-heavy: a slow disk gets fewer ops)")
)

// model is the trivially correct reference: a map per state.
type model map[string]string

func (m model) clone() model {
	c := make(model, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestRandomizedAgainstModel runs random operations (sets, deletes,
// batches, reads, iteration both ways with random bounds, snapshots,
// flushes, compactions, close and reopen) on a DB with tiny memtables and
// levels, and checks every result against an in-memory model.
func TestRandomizedAgainstModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runModel(t, seed, *modelOps, smallOptions())
		})
	}
}

func runModel(t *testing.T, seed uint64, ops int, opts *Options) {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	dir := t.TempDir()
	db := openTestDB(t, dir, opts)
	defer func() { db.Close() }()
	state := model{}
	type snap struct {
		s     *Snapshot
		state model
	}
	var snaps []snap
	key := func() string {
		// A small key space gives overwrites and deletes of present keys;
		// a wide one gives misses.
		if rng.IntN(4) == 0 {
			return fmt.Sprintf("key%06d", rng.IntN(100000))
		}
		return fmt.Sprintf("key%06d", rng.IntN(400))
	}
	value := func() string {
		return fmt.Sprintf("v%d-%s", rng.Uint32(), bytes.Repeat([]byte{'x'}, rng.IntN(200)))
	}
	bound := func() []byte {
		if rng.IntN(3) == 0 {
			return nil
		}
		return []byte(key())
	}
	start := time.Now()
	for op := range ops {
		if time.Since(start) > *modelDuration {
			t.Logf("time limit reached after %d of %d ops", op, ops)
			break
		}
		switch r := rng.IntN(100); {
		case r < 35:
			k, v := key(), value()
			if err := db.Set([]byte(k), []byte(v), &WriteOptions{Sync: rng.IntN(50) == 0}); err != nil {
				t.Fatalf("op %d: Set: %v", op, err)
			}
			state[k] = v
		case r < 45:
			k := key()
			if err := db.Delete([]byte(k), &WriteOptions{}); err != nil {
				t.Fatalf("op %d: Delete: %v", op, err)
			}
			delete(state, k)
		case r < 55:
			b := db.NewBatch()
			for range rng.IntN(20) + 1 {
				k := key()
				if rng.IntN(4) == 0 {
					b.Delete([]byte(k))
					delete(state, k)
				} else {
					v := value()
					b.Set([]byte(k), []byte(v))
					state[k] = v
				}
			}
			if err := db.Apply(b, &WriteOptions{}); err != nil {
				t.Fatalf("op %d: Apply: %v", op, err)
			}
		case r < 70:
			k := key()
			checkGet(t, op, "db", k, state, db.Get)
			if len(snaps) > 0 {
				s := snaps[rng.IntN(len(snaps))]
				checkGet(t, op, "snapshot", k, s.state, s.s.Get)
			}
		case r < 80:
			lower, upper := bound(), bound()
			if lower != nil && upper != nil && bytes.Compare(lower, upper) > 0 {
				lower, upper = upper, lower
			}
			o := &IterOptions{LowerBound: lower, UpperBound: upper}
			if len(snaps) > 0 && rng.IntN(2) == 0 {
				s := snaps[rng.IntN(len(snaps))]
				checkRandomWalk(t, op, rng, s.s.NewIter(o), s.state, lower, upper)
			} else {
				checkRandomWalk(t, op, rng, db.NewIter(o), state, lower, upper)
			}
		case r < 84:
			if len(snaps) < 4 {
				snaps = append(snaps, snap{db.NewSnapshot(), state.clone()})
			}
		case r < 87:
			if len(snaps) > 0 {
				i := rng.IntN(len(snaps))
				snaps[i].s.Close()
				snaps = slices.Delete(snaps, i, i+1)
			}
		case r < 92:
			if err := db.Flush(); err != nil {
				t.Fatalf("op %d: Flush: %v", op, err)
			}
		case r < 96:
			lower, upper := bound(), bound()
			if err := db.Compact(lower, upper); err != nil {
				t.Fatalf("op %d: Compact: %v", op, err)
			}
		default:
			for _, s := range snaps {
				s.s.Close()
			}
			snaps = nil
			if err := db.Close(); err != nil {
				t.Fatalf("op %d: Close: %v", op, err)
			}
			db = openTestDB(t, dir, opts)
		}
	}
	checkRandomWalk(t, ops, rng, db.NewIter(nil), state, nil, nil)
	m := db.Metrics()
	t.Logf("%d ops in %s; final shape:\n%s", ops, time.Since(start).Round(time.Millisecond), &m)
}

func checkGet(t *testing.T, op int, what, k string, state model, get func([]byte) ([]byte, error)) {
	t.Helper()
	v, err := get([]byte(k))
	want, ok := state[k]
	switch {
	case !ok && !errors.Is(err, ErrNotFound):
		t.Fatalf("op %d: %s Get(%s) = %q, %v; want ErrNotFound", op, what, k, v, err)
	case ok && (err != nil || string(v) != want):
		t.Fatalf("op %d: %s Get(%s) = %.20q, %v; want %.20q", op, what, k, v, err, want)
	}
}

// checkRandomWalk drives an iterator with a random sequence of
// positioning calls and compares each result with the model.
func checkRandomWalk(t *testing.T, op int, rng *rand.Rand, it *Iterator, state model, lower, upper []byte) {
	t.Helper()
	defer it.Close()
	keys := sortedKeys(state, lower, upper)
	pos := -1 // index into keys; -1 or len(keys) when invalid
	for step := range 40 {
		var ok bool
		var desc string
		switch r := rng.IntN(10); {
		case r == 0:
			desc, ok, pos = "First", it.First(), 0
		case r == 1:
			desc, ok, pos = "Last", it.Last(), len(keys)-1
		case r == 2:
			k := fmt.Sprintf("key%06d", rng.IntN(400))
			desc, ok = "SeekGE "+k, it.SeekGE([]byte(k))
			pos = sort.SearchStrings(keys, k)
		case r == 3:
			k := fmt.Sprintf("key%06d", rng.IntN(400))
			desc, ok = "SeekLT "+k, it.SeekLT([]byte(k))
			pos = sort.SearchStrings(keys, k) - 1
		case r < 7:
			if pos < 0 || pos >= len(keys) {
				continue
			}
			desc, ok = "Next", it.Next()
			pos++
		default:
			if pos < 0 || pos >= len(keys) {
				continue
			}
			desc, ok = "Prev", it.Prev()
			pos--
		}
		wantOK := pos >= 0 && pos < len(keys)
		if ok != wantOK {
			t.Fatalf("op %d step %d: %s = %v, want %v (err %v)", op, step, desc, ok, wantOK, it.Error())
		}
		if ok && (string(it.Key()) != keys[pos] || string(it.Value()) != state[keys[pos]]) {
			t.Fatalf("op %d step %d: %s at %q, want %q", op, step, desc, it.Key(), keys[pos])
		}
		if !ok {
			pos = -1
		}
	}
	if err := it.Error(); err != nil {
		t.Fatalf("op %d: iterator error: %v", op, err)
	}
}
