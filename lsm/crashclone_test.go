package lsm

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

var (
	crashCloneDuration = flag.Duration("crashclone-duration", 3*time.Second, "time budget of TestCrashClones")
	crashCloneSeed     = flag.Uint64("crashclone-seed", 0, "run only this seed of TestCrashClones, again and again for its time budget (failures name the seed; background timing varies between runs)")
)

// crashClone is the state a power loss left at one moment of a workload,
// and which prefixes of each writer's batches it may hold.
type crashClone struct {
	fs     *vfs.MemFS
	lo, hi []int // per writer: batches acknowledged with Sync (all must be there), batches begun
}

// crashStats counts what TestCrashClones checked.
type crashStats struct {
	clones, synced, batches int
	// reused counts WAL segments written over a retired one's file.
	reused int64
}

func (s *crashStats) add(o crashStats) {
	s.clones += o.clones
	s.synced += o.synced
	s.batches += o.batches
	s.reused += o.reused
}

// TestCrashClones runs random workloads on the in-memory filesystem: sets
// and deletes in batches synced or not, flushes, compactions, reopens,
// with tiny memtables so that background flushes and compactions race the
// writes. It takes crash clones at random moments (the files as a power
// loss would leave them, unsynced tails dropped or torn at random) and
// opens each: what it holds must be exactly the state after some prefix of
// the batches that includes every batch acknowledged with Sync before the
// clone, with no batch partly there. Each recovered clone is crashed again
// after one more synced write, to check that recovery itself left the
// store durable. Odd rounds run one writer (and reopen the DB now and
// then); even rounds run concurrent writers, each checked for a prefix of
// its own batches.
func TestCrashClones(t *testing.T) {
	start := time.Now()
	var rounds int
	var total crashStats
	for seed := uint64(1); time.Since(start) < *crashCloneDuration || rounds < 2; seed++ {
		if *crashCloneSeed != 0 {
			seed = *crashCloneSeed
		}
		if seed%2 == 1 {
			total.add(crashCloneRound(t, seed))
		} else {
			total.add(concurrentCrashCloneRound(t, seed))
		}
		rounds++
	}
	t.Logf("%d workloads, %d crash clones opened and crashed again; %d batches acknowledged with Sync before a clone found whole, %d batches checked in all; %d WAL segments written over retired ones",
		rounds, total.clones, total.synced, total.batches, total.reused)
	if total.reused == 0 {
		t.Fatal("no WAL segment reused a retired one's file: the clones never tested recovery over an older segment's records")
	}
}

// crashOptions are small options varied by rng.
func crashOptions(rng *rand.Rand, fs vfs.FS) *Options {
	opts := smallOptions()
	opts.FS = fs
	opts.MemTableSize = int64(8<<10 + rng.IntN(24<<10))
	opts.DisableBackgroundCompactions = rng.IntN(5) == 0
	return opts
}

// randomBatch builds a batch of sets and deletes of keys prefix+NNN and
// returns it with its mutations; values name the batch.
func randomBatch(db *DB, rng *rand.Rand, prefix string, keys, id int) (*Batch, []mutation) {
	b := db.NewBatch()
	var ops []mutation
	for j := range 1 + rng.IntN(8) {
		k := fmt.Sprintf("%s%03d", prefix, rng.IntN(keys))
		if rng.IntN(4) == 0 {
			b.Delete([]byte(k))
			ops = append(ops, mutation{key: k, del: true})
		} else {
			v := fmt.Sprintf("%s#%d/%d-%s", prefix, id, j, strings.Repeat("v", rng.IntN(100)))
			b.Set([]byte(k), []byte(v))
			ops = append(ops, mutation{key: k, value: v})
		}
	}
	return b, ops
}

// crashCloneRound runs one writer with flushes, compactions and reopens.
func crashCloneRound(t *testing.T, seed uint64) crashStats {
	rng := rand.New(rand.NewPCG(seed, 42))
	mem := vfs.NewMem()
	opts := crashOptions(rng, mem)
	newManifests := rng.IntN(4) == 0
	open := func() *DB {
		db, err := Open("/db", opts)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if newManifests {
			setMaxManifestSize(db, 0)
		}
		return db
	}
	db := open()
	var (
		batches    [][]mutation
		clones     []crashClone
		lastSynced = -1
		reused     int64
	)
	for n := range 300 {
		b, ops := randomBatch(db, rng, "k", 200, n)
		sync := rng.IntN(3) == 0
		if err := db.Apply(b, &WriteOptions{Sync: sync}); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		batches = append(batches, ops)
		if sync {
			lastSynced = n
		}
		var err error
		switch rng.IntN(50) {
		case 0, 1:
			err = db.Flush()
		case 2:
			lo := fmt.Sprintf("k%03d", rng.IntN(200))
			err = db.Compact([]byte(lo), []byte(lo+"~"))
		case 3:
			reused += db.Metrics().WAL.Reused
			err = db.Close()
			db = open()
		}
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if rng.IntN(20) == 0 {
			var tails *rand.Rand
			if rng.IntN(2) == 0 {
				tails = rng
			}
			clones = append(clones, crashClone{fs: mem.CrashClone(tails), lo: []int{lastSynced + 1}, hi: []int{n + 1}})
		}
	}
	reused += db.Metrics().WAL.Reused
	if err := db.Close(); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	st := crashStats{reused: reused}
	for i, c := range clones {
		checkCrashClone(t, fmt.Sprintf("seed %d clone %d", seed, i), c, []string{"k"}, [][][]mutation{batches}, rng)
		st.clones++
		st.synced += c.lo[0]
		st.batches += c.hi[0]
	}
	return st
}

// concurrentCrashCloneRound runs writers, each on its own keys, and a
// goroutine flushing and compacting, and takes clones while they run.
func concurrentCrashCloneRound(t *testing.T, seed uint64) crashStats {
	const writers, perWriter = 3, 150
	rng := rand.New(rand.NewPCG(seed, 42))
	mem := vfs.NewMem()
	db, err := Open("/db", crashOptions(rng, mem))
	if err != nil {
		t.Fatal(err)
	}
	var (
		batches  [writers][][]mutation // each written by its writer only
		begun    [writers]atomic.Int64 // batches whose Apply began
		synced   [writers]atomic.Int64 // batches up to the last acknowledged with Sync
		done     = make(chan struct{})
		wg       sync.WaitGroup
		failures = make(chan error, writers) // from writers that failed
		bgResult = make(chan error, 1)       // from the flusher when done
	)
	for w := range writers {
		wrng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range perWriter {
				b, ops := randomBatch(db, wrng, fmt.Sprintf("w%d/", w), 60, n)
				batches[w] = append(batches[w], ops)
				sync := wrng.IntN(3) == 0
				begun[w].Store(int64(n + 1))
				if err := db.Apply(b, &WriteOptions{Sync: sync}); err != nil {
					failures <- err
					return
				}
				if sync {
					synced[w].Store(int64(n + 1))
				}
			}
		}()
	}
	go func() {
		brng := rand.New(rand.NewPCG(seed, 99))
		for {
			select {
			case <-done:
				bgResult <- nil
				return
			case <-time.After(time.Duration(brng.IntN(3000)) * time.Microsecond):
			}
			var err error
			if brng.IntN(3) == 0 {
				err = db.Compact(nil, nil)
			} else {
				err = db.Flush()
			}
			if err != nil {
				bgResult <- err
				return
			}
		}
	}()
	var clones []crashClone
	for len(clones) < 12 {
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond)
		c := crashClone{lo: make([]int, writers), hi: make([]int, writers)}
		for w := range writers {
			c.lo[w] = int(synced[w].Load())
		}
		var tails *rand.Rand
		if rng.IntN(2) == 0 {
			tails = rng
		}
		c.fs = mem.CrashClone(tails)
		finished := true
		for w := range writers {
			c.hi[w] = int(begun[w].Load())
			finished = finished && c.hi[w] == perWriter
		}
		clones = append(clones, c)
		if finished {
			break
		}
	}
	wg.Wait()
	close(done)
	close(failures)
	for err := range failures {
		t.Fatalf("seed %d: a writer: %v", seed, err)
	}
	if err := <-bgResult; err != nil {
		t.Fatalf("seed %d: flush or compaction: %v", seed, err)
	}
	st := crashStats{reused: db.Metrics().WAL.Reused}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	prefixes := make([]string, writers)
	for w := range writers {
		prefixes[w] = fmt.Sprintf("w%d/", w)
	}
	for i, c := range clones {
		checkCrashClone(t, fmt.Sprintf("seed %d clone %d (concurrent)", seed, i), c, prefixes, batches[:], rng)
		st.clones++
		for w := range writers {
			st.synced += c.lo[w]
			st.batches += c.hi[w]
		}
	}
	return st
}

// checkCrashClone opens a clone and checks that each writer's keys (those
// starting with prefixes[w]) hold a prefix of its batches within the
// clone's bounds. Then it writes one more synced batch, crashes again, and
// checks that the second clone holds the same plus that batch.
func checkCrashClone(t *testing.T, what string, c crashClone, prefixes []string, batches [][][]mutation, rng *rand.Rand) {
	t.Helper()
	// What a crash leaves is never damage: the strict checker agrees.
	if _, err := Verify("/db", c.fs); err != nil {
		t.Fatalf("%s: Verify of a crash clone: %v", what, err)
	}
	db, err := Open("/db", &Options{FS: c.fs, MemTableSize: 16 << 10})
	if err != nil {
		t.Fatalf("%s: opening a crash clone: %v", what, err)
	}
	found := make([]int, len(prefixes))
	for w, prefix := range prefixes {
		got := scanRange(t, db, []byte(prefix), prefixSuccessor([]byte(prefix)))
		found[w] = matchPrefixOf(t, what+" writer "+prefix, got, batches[w], c.lo[w], c.hi[w])
	}
	// Recovery must have left everything it recovered durable, and the
	// store must take durable writes again.
	b, ops := randomBatch(db, rng, prefixes[0], 60, -1)
	if err := db.Apply(b, nil); err != nil {
		t.Fatalf("%s: a write after recovery: %v", what, err)
	}
	again := c.fs.CrashClone(rng)
	db.Close()
	db, err = Open("/db", &Options{FS: again})
	if err != nil {
		t.Fatalf("%s: opening a crash clone of a recovered clone: %v", what, err)
	}
	defer db.Close()
	for w, prefix := range prefixes {
		history := batches[w][:found[w]]
		if w == 0 {
			history = append(history[:found[w]:found[w]], ops)
		}
		got := scanRange(t, db, []byte(prefix), prefixSuccessor([]byte(prefix)))
		matchPrefixOf(t, what+" crashed again, writer "+prefix, got, history, len(history), len(history))
	}
}
