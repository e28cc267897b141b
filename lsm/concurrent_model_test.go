package lsm

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/base"
)

// TestConcurrentWritersAgainstModel has writers commit random batches at
// once (sets and deletes over one shared key space, some synced, through
// Enqueue and Wait) while a reader takes snapshots, on memtables small
// enough to rotate and flush throughout. Every batch records the sequence
// numbers it got. Afterwards the batches, in sequence order, make the
// model at every sequence number, and each snapshot must hold exactly the
// model at its own: a batch is visible whole or not at all, and a snapshot
// sees every batch published before it and none after.
func TestConcurrentWritersAgainstModel(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { runConcurrentModel(t, seed) })
	}
}

// committed is a batch as it was committed: its ops and the sequence
// numbers it got.
type committed struct {
	first, last base.SeqNum
	ops         []mutation
}

func runConcurrentModel(t *testing.T, seed uint64) {
	const writers, batchesEach, keys = 4, 300, 200
	opts := smallOptions()
	db := openTestDB(t, t.TempDir(), opts)
	defer db.Close()

	var (
		wg   sync.WaitGroup
		logs = make([][]committed, writers)
		errs = make([]error, writers)
	)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for range batchesEach {
				b := db.NewBatch()
				var ops []mutation
				for range 1 + rng.IntN(8) {
					k := fmt.Sprintf("key%04d", rng.IntN(keys))
					if rng.IntN(4) == 0 {
						b.Delete([]byte(k))
						ops = append(ops, mutation{key: k, del: true})
					} else {
						v := fmt.Sprintf("w%d-%d-%s", w, rng.Uint32(), k)
						b.Set([]byte(k), []byte(v))
						ops = append(ops, mutation{key: k, value: v})
					}
				}
				p, err := db.Enqueue(b, &WriteOptions{Sync: rng.IntN(8) == 0})
				if err == nil {
					err = p.Wait()
				}
				if err != nil {
					errs[w] = err
					return
				}
				if v := base.SeqNum(db.visibleSeq.Load()); v < p.last {
					errs[w] = fmt.Errorf("batch ending at %d committed with %d visible", p.last, v)
					return
				}
				logs[w] = append(logs[w], committed{first: p.last - base.SeqNum(len(ops)) + 1, last: p.last, ops: ops})
			}
		})
	}
	type snap struct {
		s     *Snapshot
		state model
	}
	var snaps []snap
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 40 {
			s := db.NewSnapshot()
			snaps = append(snaps, snap{s: s, state: scanSnapshot(t, s)})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	wg.Wait()
	<-done
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	all := slices.Concat(logs...)
	slices.SortFunc(all, func(a, b committed) int { return cmp.Compare(a.first, b.first) })
	for i := 1; i < len(all); i++ {
		if all[i].first != all[i-1].last+1 {
			t.Fatalf("batches at %d..%d and %d..%d: sequence numbers not contiguous", all[i-1].first, all[i-1].last, all[i].first, all[i].last)
		}
	}
	stateAt := func(seq base.SeqNum) model {
		m := model{}
		for _, c := range all {
			if c.last > seq {
				if c.first <= seq {
					t.Fatalf("sequence number %d falls inside the batch %d..%d", seq, c.first, c.last)
				}
				break
			}
			applyMutations(m, c.ops)
		}
		return m
	}
	final := all[len(all)-1].last
	if mid := slices.IndexFunc(snaps, func(sn snap) bool { return sn.s.seq > 0 && sn.s.seq < final }); mid < 0 {
		t.Fatal("no snapshot was taken while the writers ran")
	}
	for i, sn := range snaps {
		if want := stateAt(sn.s.seq); !maps.Equal(sn.state, want) {
			t.Fatalf("snapshot %d at sequence number %d holds %d keys; the model at it %d (first difference: %s)",
				i, sn.s.seq, len(sn.state), len(want), firstDifference(sn.state, want))
		}
		// Read again now that every writer is done: still the same.
		if again := scanSnapshot(t, sn.s); !maps.Equal(again, sn.state) {
			t.Fatalf("snapshot %d changed after the writers finished: %s", i, firstDifference(again, sn.state))
		}
		sn.s.Close()
	}
	if got, want := scanAll(t, db), stateAt(final); !maps.Equal(got, want) {
		t.Fatalf("the DB differs from the model of every batch: %s", firstDifference(got, want))
	}
}

// scanSnapshot reads a snapshot whole.
func scanSnapshot(t *testing.T, s *Snapshot) model {
	t.Helper()
	m := model{}
	it := s.NewIter(nil)
	for ok := it.First(); ok; ok = it.Next() {
		m[string(it.Key())] = string(it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return m
}

// firstDifference names the first key, in order, where two models differ.
func firstDifference(a, b model) string {
	keys := slices.Sorted(maps.Keys(a))
	keys = append(keys, slices.Sorted(maps.Keys(b))...)
	slices.Sort(keys)
	for _, k := range keys {
		va, oka := a[k]
		vb, okb := b[k]
		if va != vb || oka != okb {
			return fmt.Sprintf("%s: %q (present %v) against %q (present %v)", k, va, oka, vb, okb)
		}
	}
	return "none"
}
