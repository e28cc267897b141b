package lsm

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

var (
	faultDuration = flag.Duration("fault-duration", 3*time.Second, "time budget of TestRandomFaults")
	faultSeed     = flag.Uint64("fault-seed", 0, "run only this seed of TestRandomFaults, again and again for its time budget (failures name the seed)")
)

// randomFault picks a fault for a random workload: an operation, the files
// it strikes, when, and how.
func randomFault(rng *rand.Rand) vfs.Fault {
	type choice struct {
		op      vfs.Op
		matches []string
		calls   int // about how many matching calls a round makes
	}
	choices := []choice{
		{vfs.OpWrite, []string{"", ".log", ".sst", "MANIFEST", ".tmp"}, 200},
		{vfs.OpSync, []string{"", ".log", ".sst", "MANIFEST", ".tmp"}, 60},
		{vfs.OpSyncDir, []string{""}, 20},
		{vfs.OpCreate, []string{"", ".log", ".sst", "MANIFEST", ".tmp"}, 15},
		{vfs.OpRename, []string{"CURRENT"}, 4},
		{vfs.OpRemove, []string{"", ".log", ".sst"}, 10},
		{vfs.OpRead, []string{".sst"}, 300},
		{vfs.OpOpen, []string{".sst"}, 20},
		{vfs.OpClose, []string{"", ".log", ".sst"}, 30},
	}
	c := choices[rng.IntN(len(choices))]
	f := vfs.Fault{Op: c.op, Match: c.matches[rng.IntN(len(c.matches))], After: rng.IntN(c.calls)}
	if rng.IntN(2) == 0 {
		f.Err = syscall.ENOSPC
	}
	f.Short = c.op == vfs.OpWrite && rng.IntN(2) == 0
	f.Sticky = rng.IntN(3) == 0
	if rng.IntN(4) == 0 {
		f.After, f.Probability = 0, 0.01+rng.Float64()*0.1
	}
	return f
}

// TestRandomFaults runs random workloads (sets and deletes, batches synced
// or not, flushes, compactions, reads) on a disk armed with one random
// fault, with background work running. At the first failed write, flush
// or compaction it checks the contract: the failure wraps the fault;
// later writes fail with ErrStopped; the open DB still reads exactly the
// acknowledged state; a crash clone taken then, and a reopen once the
// disk is healthy, hold a prefix of the batches that includes every one
// acknowledged with Sync and no batch partly. Read faults must only fail
// the reads they hit.
func TestRandomFaults(t *testing.T) {
	start := time.Now()
	var rounds, fired, failedOps, batchesChecked int
	for seed := uint64(1); rounds == 0 || time.Since(start) < *faultDuration; seed++ {
		if *faultSeed != 0 {
			seed = *faultSeed
		}
		f, n, failed := randomFaultRound(t, seed)
		rounds++
		batchesChecked += n
		if f > 0 {
			fired += f
		}
		if failed {
			failedOps++
		}
	}
	t.Logf("%d rounds, %d faults injected and survived, %d of them failing a write, flush or compaction; %d acknowledged batches checked",
		rounds, fired, failedOps, batchesChecked)
}

// randomFaultRound runs one round and returns the faults that fired, the
// acknowledged batches checked, and whether a write, flush or compaction
// failed.
func randomFaultRound(t *testing.T, seed uint64) (int, int, bool) {
	rng := rand.New(rand.NewPCG(seed, 1234))
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem, seed)
	opts := smallOptions()
	opts.FS = efs
	opts.MemTableSize = int64(8<<10 + rng.IntN(24<<10))
	opts.DisableBackgroundCompactions = rng.IntN(4) == 0
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	if rng.IntN(4) == 0 {
		setMaxManifestSize(db, 0)
	}
	fault := randomFault(rng)
	faultErr := fault.Err
	if faultErr == nil {
		faultErr = syscall.EIO
	}
	where := fmt.Sprintf("seed %d, fault %+v", seed, fault)
	efs.Inject(fault)

	var (
		batches    [][]mutation // acknowledged, in order
		state      = model{}    // after all of them
		lastSynced = -1
		failure    error
		maybeOne   bool // the failed operation was a write that may be durable
	)
	for i := 0; i < 400 && failure == nil; i++ {
		switch r := rng.IntN(100); {
		case r < 70:
			var ops []mutation
			b := db.NewBatch()
			for j := range 1 + rng.IntN(6) {
				k := fmt.Sprintf("k%04d", rng.IntN(300))
				if rng.IntN(5) == 0 {
					b.Delete([]byte(k))
					ops = append(ops, mutation{key: k, del: true})
				} else {
					v := fmt.Sprintf("b%d/%d-%s", i, j, strings.Repeat("x", rng.IntN(120)))
					b.Set([]byte(k), []byte(v))
					ops = append(ops, mutation{key: k, value: v})
				}
			}
			sync := rng.IntN(2) == 0
			if err := db.Apply(b, &WriteOptions{Sync: sync}); err != nil {
				// A write refused up front is not in the WAL; one that failed
				// there may be durable all the same.
				failure, maybeOne = err, !errors.Is(err, ErrStopped)
				if maybeOne {
					batches = append(batches, ops)
				}
				break
			}
			batches = append(batches, ops)
			applyMutations(state, ops)
			if sync {
				lastSynced = len(batches) - 1
			}
		case r < 75:
			failure = db.Flush()
		case r < 78:
			lo := fmt.Sprintf("k%04d", rng.IntN(300))
			failure = db.Compact([]byte(lo), nil)
		default:
			k := fmt.Sprintf("k%04d", rng.IntN(300))
			v, err := db.Get([]byte(k))
			want, ok := state[k]
			switch {
			case err != nil && !errors.Is(err, ErrNotFound):
				if !errors.Is(err, faultErr) || fault.Op != vfs.OpRead && fault.Op != vfs.OpOpen {
					t.Fatalf("%s: Get(%s): %v", where, k, err)
				}
			case ok != (err == nil) || ok && string(v) != want:
				t.Fatalf("%s: Get(%s) = %q, %v; want %q", where, k, v, err, want)
			}
		}
	}
	acked := len(batches)
	if maybeOne {
		acked--
	}
	fired, _ := efs.Injected()
	if failure != nil {
		if fired == 0 || !errors.Is(failure, faultErr) {
			t.Fatalf("%s: failure %v (faults fired: %d)", where, failure, fired)
		}
		if err := db.Set([]byte("after"), nil, nil); !errors.Is(err, ErrStopped) || !errors.Is(err, faultErr) {
			t.Fatalf("%s: a write after the failure %v returned %v", where, failure, err)
		}
	}
	if fault.Op == vfs.OpRead || fault.Op == vfs.OpOpen {
		efs.Disarm() // so that reads of tables work
	}
	if got := scanAll(t, db); !maps.Equal(got, state) {
		t.Fatalf("%s: after %v the open DB does not hold the acknowledged state", where, failure)
	}
	// Crash now: synced batches must be there. The crash clone is opened
	// on a healthy disk, and taken again once open (recovery must have
	// made what it recovered durable).
	clone := mem.CrashClone(rng)
	cdb, err := Open("/db", &Options{FS: clone, MemTableSize: opts.MemTableSize})
	if err != nil {
		t.Fatalf("%s: opening a crash clone after %v: %v", where, failure, err)
	}
	p := matchPrefix(t, where+": crash clone", cdb, batches, lastSynced+1, len(batches))
	again := clone.CrashClone(nil)
	cdb.Close()
	cdb, err = Open("/db", &Options{FS: again})
	if err != nil {
		t.Fatalf("%s: reopening a crash clone after a second crash: %v", where, err)
	}
	matchPrefix(t, where+": crash clone of a recovered clone", cdb, batches, p, p)
	cdb.Close()

	if rng.IntN(2) == 0 {
		efs.Disarm()
	}
	db.Close() // with the fault still armed, perhaps: it must not hang
	efs.Disarm()
	db, err = Open("/db", opts)
	if err != nil {
		t.Fatalf("%s: reopening on a healthy disk after %v: %v", where, failure, err)
	}
	defer db.Close()
	// On a healthy disk nothing is lost unless the WAL failed (a write,
	// fsync or close of a segment, or the directory fsync making a new
	// segment's name durable, which its writer waits for before writing),
	// which can take unsynced batches with it.
	lo := acked
	if fault.Op == vfs.OpWrite || fault.Op == vfs.OpSync || fault.Op == vfs.OpClose || fault.Op == vfs.OpSyncDir {
		lo = lastSynced + 1
	}
	matchPrefix(t, where+": reopened", db, batches, lo, len(batches))
	if err := db.Set([]byte("after"), nil, nil); err != nil {
		t.Fatalf("%s: a write after reopening: %v", where, err)
	}
	return fired, acked, failure != nil
}
