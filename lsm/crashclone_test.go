package lsm

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

var crashCloneDuration = flag.Duration("crashclone-duration", 3*time.Second, "time budget of TestCrashClones")

// crashClone is the state a power loss left at one moment of a workload.
type crashClone struct {
	fs         *vfs.MemFS
	lastSynced int // the last batch acknowledged with Sync before the clone
	applied    int // batches applied (acknowledged) before the clone
}

// TestCrashClones runs random workloads (batches synced or not, flushes,
// compactions with background work racing) on the in-memory filesystem,
// takes crash clones at random moments — the files as a power loss would
// leave them, with random parts of unsynced tails — and opens each:
// every batch acknowledged with Sync, and all before it, is there; no
// batch is partly there; and what survives is a prefix of the batches.
func TestCrashClones(t *testing.T) {
	start := time.Now()
	rounds, clonesChecked, syncedChecked := 0, 0, 0
	for seed := uint64(1); time.Since(start) < *crashCloneDuration || rounds == 0; seed++ {
		rng := rand.New(rand.NewPCG(seed, 42))
		mem := vfs.NewMem()
		opts := smallOptions()
		opts.FS = mem
		db, err := Open("/db", opts)
		if err != nil {
			t.Fatal(err)
		}
		var clones []crashClone
		lastSynced := -1
		for n := range 300 {
			b := db.NewBatch()
			for i := range crashBatchKeys {
				b.Set(crashKey(n, i), fmt.Appendf(nil, "batch %d", n))
			}
			sync := rng.IntN(3) == 0
			if err := db.Apply(b, &WriteOptions{Sync: sync}); err != nil {
				t.Fatal(err)
			}
			if sync {
				lastSynced = n
			}
			switch rng.IntN(40) {
			case 0:
				if err := db.Flush(); err != nil {
					t.Fatal(err)
				}
			case 1:
				lo := rng.IntN(n + 1)
				if err := db.Compact(crashKey(lo, 0), crashKey(lo+rng.IntN(50)+1, 0)); err != nil {
					t.Fatal(err)
				}
			}
			if rng.IntN(25) == 0 {
				var tails *rand.Rand
				if rng.IntN(2) == 0 {
					tails = rng
				}
				clones = append(clones, crashClone{fs: mem.CrashClone(tails), lastSynced: lastSynced, applied: n + 1})
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		for _, c := range clones {
			checkCrashClone(t, seed, c)
			syncedChecked += c.lastSynced + 1
		}
		clonesChecked += len(clones)
		rounds++
	}
	t.Logf("%d workloads, %d crash clones opened, %d synced batches checked present and whole", rounds, clonesChecked, syncedChecked)
}

func checkCrashClone(t *testing.T, seed uint64, c crashClone) {
	t.Helper()
	opts := smallOptions()
	opts.FS = c.fs
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatalf("seed %d: opening a crash clone: %v", seed, err)
	}
	defer db.Close()
	present := -1 // the last batch found; all before it must be there too
	for n := range c.applied {
		found := 0
		for i := range crashBatchKeys {
			v, err := db.Get(crashKey(n, i))
			switch {
			case err == nil && string(v) == fmt.Sprintf("batch %d", n):
				found++
			case err == nil:
				t.Fatalf("seed %d: batch %d key %d holds %q", seed, n, i, v)
			case !errors.Is(err, ErrNotFound):
				t.Fatalf("seed %d: batch %d key %d: %v", seed, n, i, err)
			}
		}
		switch {
		case found != 0 && found != crashBatchKeys:
			t.Fatalf("seed %d: batch %d is partly there (%d of %d keys)", seed, n, found, crashBatchKeys)
		case found == 0 && n <= c.lastSynced:
			t.Fatalf("seed %d: batch %d lost, though batch %d was acknowledged with Sync", seed, n, c.lastSynced)
		case found != 0 && present != n-1:
			t.Fatalf("seed %d: batch %d survived but batch %d did not", seed, n, present+1)
		case found != 0:
			present = n
		}
	}
}
