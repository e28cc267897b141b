package main

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// params are a workload's knobs; the parent passes the same to every
// engine, so they all see the same keys in the same order.
type params struct {
	N    int    // key space: keys 0..N-1 are written by fills
	Seed uint64 // fixes every permutation and random pick
	// Reads (and scans) stop after ReadOps operations or ReadDur,
	// whichever comes first.
	ReadOps int
	ReadDur time.Duration
	// fillsync stops after SyncOps writes (0: no limit) or SyncDur.
	SyncOps int
	SyncDur time.Duration
	// FillRate caps fillseq's and fillrandom's sets per second (0: none),
	// so that engines' latencies compare at one rate of work.
	FillRate float64 `json:",omitempty"`
}

// phase is what a workload did in its measured phase.
type phase struct {
	Ops          int64 // writes, gets or scans; batch100 counts keys
	Entries      int64 // entries visited (scan)
	LogicalBytes int64 // key+value bytes the workload wrote
	LiveBytes    int64 // key+value bytes live in the DB at the end
	// Wrong counts read results that were not what was written: a missing
	// present key, a found missing key, a wrong value, a short or
	// out-of-order scan. Any makes the run fail.
	Wrong    int64
	Mistakes []string // the first few wrong results, for the error message
	// Lat holds the latency of every operation (of every batch for
	// batch100). LongestWrite is the longest write of a workload that
	// mixes reads and writes (ycsba), whose longest operation may be
	// either: a write stall shows there.
	Lat          latency
	LongestWrite time.Duration
}

// wrong records a wrong result, keeping the first few descriptions.
func (p *phase) wrong(format string, args ...any) {
	p.Wrong++
	if len(p.Mistakes) < 5 {
		p.Mistakes = append(p.Mistakes, fmt.Sprintf(format, args...))
	}
}

// err turns wrong results into the error that fails the run.
func (p *phase) err() error {
	if p.Wrong == 0 {
		return nil
	}
	return fmt.Errorf("%d wrong read results, first: %s", p.Wrong, strings.Join(p.Mistakes, "; "))
}

// workload is one benchmark. Prefilled workloads run on a DB that the same
// child first filled with fillrandom and settled (neither is timed).
type workload struct {
	Name    string
	Summary string
	Prefill bool
	Run     func(e Engine, p params) (phase, error)
}

// Seed offsets keep the workloads' random streams apart.
const (
	seedFill      = 1
	seedRead      = 2
	seedMissing   = 3
	seedScan      = 4
	seedOverwrite = 5
	seedBatch     = 6
	seedSync      = 7
	seedYCSB      = 8
)

const (
	batchSize = 100
	scanLen   = 100
)

// allWorkloads lists the workloads in the order a repeat runs them.
func allWorkloads() []workload {
	return []workload{
		{Name: "fillseq", Summary: "N sets in ascending key order, not synced, on an empty DB", Run: runFillSeq},
		{Name: "fillrandom", Summary: "N sets in random order, not synced, on an empty DB", Run: runFillRandom},
		{Name: "overwrite", Summary: "N random sets of existing keys, not synced, on a filled DB", Prefill: true, Run: runOverwrite},
		{Name: "readrandom", Summary: "random gets of present keys on a filled DB", Prefill: true, Run: runReadRandom},
		{Name: "readmissing", Summary: "random gets of absent keys of the same shape on a filled DB", Prefill: true, Run: runReadMissing},
		{Name: "scan", Summary: "iterator from a random present key, 100 entries, on a filled DB", Prefill: true, Run: runScan},
		{Name: "batch100", Summary: "N random keys in batches of 100, not synced, on an empty DB (ops = keys)", Run: runBatch100},
		{Name: "ycsba", Summary: "YCSB workload A on a filled DB: half gets, half sets of existing keys, zipfian keys (theta 0.99, scrambled), 4 goroutines, not synced", Prefill: true, Run: runYCSBA},
		{Name: "fillsync1", Summary: "synced single-key sets, 1 writer, on an empty DB", Run: func(e Engine, p params) (phase, error) { return runFillSync(e, p, 1) }},
		{Name: "fillsync8", Summary: "synced single-key sets, 8 concurrent writers, on an empty DB", Run: func(e Engine, p params) (phase, error) { return runFillSync(e, p, 8) }},
	}
}

// workloadNames lists every workload name.
func workloadNames() []string {
	var names []string
	for _, w := range allWorkloads() {
		names = append(names, w.Name)
	}
	return names
}

// findWorkload returns the named workload.
func findWorkload(name string) (workload, error) {
	for _, w := range allWorkloads() {
		if w.Name == name {
			return w, nil
		}
	}
	return workload{}, fmt.Errorf("unknown workload %q (have %v)", name, workloadNames())
}

// fill writes the keys of order (indexes into the key space), one set
// each, at most rate a second (0: as fast as the engine takes them).
func fill(e Engine, order func(j int) int, count int, seed uint64, rate float64) (phase, error) {
	g := newValueGen(seed)
	key := make([]byte, 0, keyLen)
	val := make([]byte, valueLen)
	ph := phase{Ops: int64(count), LogicalBytes: int64(count) * entryLen, LiveBytes: int64(count) * entryLen}
	began := time.Now()
	for j := range count {
		if rate > 0 && j%fillPaceEvery == 0 {
			// Outside any set's timing: only the sets' latencies count.
			time.Sleep(time.Until(began.Add(time.Duration(float64(j) / rate * float64(time.Second)))))
		}
		i := order(j)
		key = appendKey(key[:0], i, false)
		g.fill(val, i)
		start := time.Now()
		if err := e.Set(key, val, false); err != nil {
			return phase{}, err
		}
		ph.Lat.since(start)
	}
	return ph, nil
}

// fillPaceEvery is how many sets a paced fill makes between its sleeps.
const fillPaceEvery = 256

func runFillSeq(e Engine, p params) (phase, error) {
	return fill(e, func(j int) int { return j }, p.N, p.Seed+seedFill, p.FillRate)
}

func runFillRandom(e Engine, p params) (phase, error) {
	perm := permutation(p.N, p.Seed+seedFill)
	return fill(e, func(j int) int { return int(perm[j]) }, p.N, p.Seed+seedFill, p.FillRate)
}

// prefill fills a DB for the prefilled workloads: fillrandom, then Settle.
func prefill(e Engine, p params) error {
	p.FillRate = 0 // not measured: as fast as it goes
	if _, err := runFillRandom(e, p); err != nil {
		return err
	}
	return e.Settle()
}

func runOverwrite(e Engine, p params) (phase, error) {
	rng := rand.New(rand.NewPCG(p.Seed+seedOverwrite, 0))
	ph, err := fill(e, func(int) int { return rng.IntN(p.N) }, p.N, p.Seed+seedOverwrite, 0)
	// Overwrites leave the same N keys live.
	ph.LiveBytes = int64(p.N) * entryLen
	return ph, err
}

// readLoop calls op until ReadOps operations or ReadDur have passed. It
// reads the clock every 64 operations only: a clock read would cost a
// noticeable fraction of a cached get.
func readLoop(p params, lat *latency, op func() error) (int64, error) {
	limit := p.ReadOps
	if limit <= 0 {
		limit = p.N
	}
	deadline := time.Now().Add(p.ReadDur)
	var n int64
	for n < int64(limit) {
		start := time.Now()
		if err := op(); err != nil {
			return n, err
		}
		lat.since(start)
		n++
		if n%64 == 0 && p.ReadDur > 0 && time.Now().After(deadline) {
			break
		}
	}
	return n, nil
}

func runReadRandom(e Engine, p params) (phase, error) {
	var ph phase
	rng := rand.New(rand.NewPCG(p.Seed+seedRead, 0))
	key := make([]byte, 0, keyLen)
	var i int
	check := func(v []byte) {
		if got := valueIndex(v); got != i {
			ph.wrong("get %s: value of key %d", key, got)
		}
	}
	n, err := readLoop(p, &ph.Lat, func() error {
		i = rng.IntN(p.N)
		key = appendKey(key[:0], i, false)
		found, err := e.Get(key, check)
		if err == nil && !found {
			ph.wrong("get %s: not found", key)
		}
		return err
	})
	ph.Ops = n
	ph.LiveBytes = int64(p.N) * entryLen
	if err != nil {
		return ph, err
	}
	return ph, ph.err()
}

func runReadMissing(e Engine, p params) (phase, error) {
	var ph phase
	rng := rand.New(rand.NewPCG(p.Seed+seedMissing, 0))
	key := make([]byte, 0, keyLen)
	n, err := readLoop(p, &ph.Lat, func() error {
		key = appendKey(key[:0], rng.IntN(p.N), true)
		found, err := e.Get(key, func([]byte) {})
		if err == nil && found {
			ph.wrong("get %s: found an absent key", key)
		}
		return err
	})
	ph.Ops = n
	ph.LiveBytes = int64(p.N) * entryLen
	if err != nil {
		return ph, err
	}
	return ph, ph.err()
}

func runScan(e Engine, p params) (phase, error) {
	var ph phase
	rng := rand.New(rand.NewPCG(p.Seed+seedScan, 0))
	start := make([]byte, 0, keyLen)
	want := make([]byte, 0, keyLen)
	var next int // index of the key the scan should visit next
	visit := func(k, v []byte) {
		want = appendKey(want[:0], next, false)
		if !bytes.Equal(k, want) {
			ph.wrong("scan from %s: got key %s, want %s", start, k, want)
		} else if valueIndex(v) != next {
			ph.wrong("scan from %s: key %s has value of key %d", start, k, valueIndex(v))
		}
		next++
	}
	n, err := readLoop(p, &ph.Lat, func() error {
		s := rng.IntN(p.N)
		start = appendKey(start[:0], s, false)
		next = s
		got, err := e.Scan(start, scanLen, visit)
		if err != nil {
			return err
		}
		if want := min(scanLen, p.N-s); got != want {
			ph.wrong("scan from %s: %d entries, want %d", start, got, want)
		}
		ph.Entries += int64(got)
		return nil
	})
	ph.Ops = n
	ph.LiveBytes = int64(p.N) * entryLen
	if err != nil {
		return ph, err
	}
	return ph, ph.err()
}

func runBatch100(e Engine, p params) (phase, error) {
	perm := permutation(p.N, p.Seed+seedBatch)
	g := newValueGen(p.Seed + seedBatch)
	b := e.NewBatch()
	key := make([]byte, 0, keyLen)
	val := make([]byte, valueLen)
	n := int64(p.N)
	ph := phase{Ops: n, LogicalBytes: n * entryLen, LiveBytes: n * entryLen}
	for start := 0; start < p.N; start += batchSize {
		for _, i := range perm[start:min(start+batchSize, p.N)] {
			key = appendKey(key[:0], int(i), false)
			g.fill(val, int(i))
			b.Set(key, val)
		}
		start := time.Now()
		if err := b.Apply(false); err != nil {
			return phase{}, err
		}
		ph.Lat.since(start)
	}
	return ph, nil
}

// runFillSync runs writers goroutines, each doing synced single-key sets of
// distinct keys (they share one permutation through an atomic cursor), for
// SyncDur or SyncOps writes in total, whichever comes first.
func runFillSync(e Engine, p params, writers int) (phase, error) {
	perm := permutation(p.N, p.Seed+seedSync)
	limit := int64(p.N)
	if p.SyncOps > 0 {
		limit = min(limit, int64(p.SyncOps))
	}
	deadline := time.Now().Add(p.SyncDur)
	var cursor atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, writers)
	lats := make([]latency, writers)
	for w := range writers {
		wg.Go(func() {
			g := newValueGen(p.Seed + seedSync + uint64(w)<<32)
			key := make([]byte, 0, keyLen)
			val := make([]byte, valueLen)
			for time.Now().Before(deadline) {
				j := cursor.Add(1) - 1
				if j >= limit {
					return
				}
				i := int(perm[j])
				key = appendKey(key[:0], i, false)
				g.fill(val, i)
				start := time.Now()
				if err := e.Set(key, val, true); err != nil {
					errs[w] = err
					return
				}
				lats[w].since(start)
			}
		})
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return phase{}, err
	}
	// The cursor overshoots by one per writer that saw the limit.
	n := min(cursor.Load(), limit)
	ph := phase{Ops: n, LogicalBytes: n * entryLen, LiveBytes: n * entryLen}
	for w := range lats {
		ph.Lat.merge(&lats[w])
	}
	return ph, nil
}

func firstError(errs []error) error {
	i := slices.IndexFunc(errs, func(err error) bool { return err != nil })
	if i < 0 {
		return nil
	}
	return errs[i]
}

// ycsbWorkers is how many goroutines run YCSB workload A, as the issue
// that asked for it measures it.
const ycsbWorkers = 4

// runYCSBA is YCSB's workload A on a filled DB: each operation is a get or
// (as often) a set of an existing key, its key drawn from YCSB's default
// request distribution, a zipfian one scrambled over the key space, by
// ycsbWorkers goroutines until ReadOps operations in all or ReadDur. A get
// checks the value it finds: every set writes key i's own value.
func runYCSBA(e Engine, p params) (phase, error) {
	zipf := newScrambledZipfian(p.N, 0.99)
	limit := int64(p.ReadOps)
	if limit <= 0 {
		limit = int64(p.N)
	}
	deadline := time.Now().Add(p.ReadDur)
	var cursor atomic.Int64
	var wg sync.WaitGroup
	phases := make([]phase, ycsbWorkers)
	errs := make([]error, ycsbWorkers)
	for w := range ycsbWorkers {
		wg.Go(func() {
			ph := &phases[w]
			rng := rand.New(rand.NewPCG(p.Seed+seedYCSB, uint64(w)))
			g := newValueGen(p.Seed + seedYCSB + uint64(w)<<32)
			key := make([]byte, 0, keyLen)
			val := make([]byte, valueLen)
			var i int
			check := func(v []byte) {
				if got := valueIndex(v); got != i {
					ph.wrong("get %s: value of key %d", key, got)
				}
			}
			for n := 0; cursor.Add(1) <= limit; n++ {
				if n%64 == 0 && p.ReadDur > 0 && time.Now().After(deadline) {
					return
				}
				i = zipf.next(rng)
				key = appendKey(key[:0], i, false)
				start := time.Now()
				if rng.IntN(2) == 0 {
					found, err := e.Get(key, check)
					if err != nil {
						errs[w] = err
						return
					}
					if !found {
						ph.wrong("get %s: not found", key)
					}
					ph.Lat.since(start)
				} else {
					g.fill(val, i)
					if err := e.Set(key, val, false); err != nil {
						errs[w] = err
						return
					}
					d := time.Since(start)
					ph.Lat.record(d)
					ph.LongestWrite = max(ph.LongestWrite, d)
					ph.LogicalBytes += entryLen
				}
				ph.Ops++
			}
		})
	}
	wg.Wait()
	var total phase
	for _, ph := range phases {
		total.Ops += ph.Ops
		total.LogicalBytes += ph.LogicalBytes
		total.Wrong += ph.Wrong
		total.Mistakes = append(total.Mistakes, ph.Mistakes...)
		total.Lat.merge(&ph.Lat)
		total.LongestWrite = max(total.LongestWrite, ph.LongestWrite)
	}
	total.LiveBytes = int64(p.N) * entryLen
	if err := firstError(errs); err != nil {
		return total, err
	}
	return total, total.err()
}

// scrambledZipfian draws item indexes in [0, n) as YCSB's default request
// distribution does: ranks from a zipfian distribution of constant theta
// (Gray et al., "Quickly generating billion-record synthetic databases"),
// each rank hashed to an index so the popular items are spread over the
// key space rather than bunched at its start. It is read-only once made,
// so goroutines share it, each with its own source.
type scrambledZipfian struct {
	n                   int
	theta, alpha, zetan float64
	eta, halfPowTheta   float64
}

func newScrambledZipfian(n int, theta float64) *scrambledZipfian {
	var zetan float64
	for i := 1; i <= n; i++ {
		zetan += 1 / math.Pow(float64(i), theta)
	}
	zeta2 := 1 + math.Pow(0.5, theta)
	return &scrambledZipfian{
		n:            n,
		theta:        theta,
		alpha:        1 / (1 - theta),
		zetan:        zetan,
		eta:          (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan),
		halfPowTheta: math.Pow(0.5, theta),
	}
}

func (z *scrambledZipfian) next(rng *rand.Rand) int {
	u := rng.Float64()
	uz := u * z.zetan
	var rank int
	switch {
	case uz < 1:
		rank = 0
	case uz < 1+z.halfPowTheta:
		rank = 1
	default:
		rank = min(int(float64(z.n)*math.Pow(z.eta*u-z.eta+1, z.alpha)), z.n-1)
	}
	// FNV-1a over the rank's bytes, as YCSB scrambles.
	h := uint64(14695981039346656037)
	for b := range 8 {
		h ^= uint64(rank>>(8*b)) & 0xff
		h *= 1099511628211
	}
	return int(h % uint64(z.n))
}
