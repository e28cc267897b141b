package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The large run (engine -large) measures the engines where their data is
// far beyond the block cache and the page cache cannot hold it either: one
// child per engine and repeat fills the key space once and then runs the
// read workloads on what the fill left, with the LSM's shape sampled
// throughout. A prefill per workload, as the standard suite does, would
// take minutes per run at 20 million keys.

// largeSpec is the large run's part of a child's spec.
type largeSpec struct {
	// Cgroup is a memory cgroup (v1) the parent made for this child: the
	// child joins it at once and sets MemLimit on it once the fill's
	// compactions are drained, so that the page cache the reads may use is
	// bounded and reads of a data set larger than that go to the disk.
	Cgroup   string `json:"cgroup,omitempty"`
	MemLimit int64  `json:"mem_limit,omitempty"`
	// SampleEvery is the period of the shape samples.
	SampleEvery time.Duration `json:"sample_every"`
	// DrainLimit bounds the wait, after the fill, for the compaction debt
	// to be paid before the reads start.
	DrainLimit time.Duration `json:"drain_limit"`
}

// sample is the engine's shape and the child's I/O at one moment of a
// large run.
type sample struct {
	Seconds float64 `json:"t"` // since the chain started
	Phase   string  `json:"phase"`
	// Debt is the engine's own estimate of the bytes compactions must
	// still rewrite (Tabula's Compaction.Debt, Pebble's EstimatedDebt);
	// -1 where the engine does not estimate it.
	Debt       int64 `json:"debt"`
	L0Files    int64 `json:"l0_files"`
	Compacting int64 `json:"compacting"`
	DiskBytes  int64 `json:"disk_bytes"`
	// Bytes the child read from and wrote to the disk since the chain
	// started (/proc/self/io).
	ReadBytes  int64 `json:"read_bytes"`
	WriteBytes int64 `json:"write_bytes"`
	RSS        int64 `json:"rss"`
}

// lsmShape is what an engine says of its tree's shape.
type lsmShape struct {
	Debt       int64
	L0Files    int64
	Compacting int64
}

// shaper is implemented by engines that report their tree's shape.
type shaper interface {
	Shape() lsmShape
}

// sampler records samples on its own goroutine until stopped.
type sampler struct {
	e     Engine
	dir   string
	start time.Time
	io0   ioCounters

	mu      sync.Mutex
	phase   string
	samples []sample

	stopc chan struct{}
	done  chan struct{}
}

func startSampler(e Engine, dir string, every time.Duration) (*sampler, error) {
	io0, err := readProcIO()
	if err != nil {
		return nil, err
	}
	s := &sampler{e: e, dir: dir, start: time.Now(), io0: io0, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stopc:
				return
			case <-t.C:
				s.take()
			}
		}
	}()
	return s, nil
}

func (s *sampler) setPhase(p string) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

// take records one sample; a counter that cannot be read stays zero (a
// sample is an observation, not a measured phase).
func (s *sampler) take() {
	smp := sample{Seconds: time.Since(s.start).Seconds(), Debt: -1}
	if sh, ok := s.e.(shaper); ok {
		shape := sh.Shape()
		smp.Debt, smp.L0Files, smp.Compacting = shape.Debt, shape.L0Files, shape.Compacting
	}
	if du, err := diskUsage(s.dir); err == nil {
		smp.DiskBytes = du.Allocated
	}
	if io, err := readProcIO(); err == nil {
		d := io.sub(s.io0)
		smp.ReadBytes, smp.WriteBytes = d.ReadBytes, d.WriteBytes
	}
	_, smp.RSS, _ = memStatus()
	s.mu.Lock()
	smp.Phase = s.phase
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

// stop ends the sampling and returns the samples.
func (s *sampler) stop() []sample {
	close(s.stopc)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// checkChain validates a large run's workloads: a fill on the empty DB
// first, then workloads meant for a filled DB.
func checkChain(chain []string) error {
	if len(chain) == 0 {
		return errors.New("no workloads selected")
	}
	if chain[0] != "fillrandom" && chain[0] != "fillseq" {
		return fmt.Errorf("-large: the first workload must be fillrandom or fillseq, not %q", chain[0])
	}
	for _, name := range chain[1:] {
		w, err := findWorkload(name)
		if err != nil {
			return err
		}
		if !w.Prefill {
			return fmt.Errorf("-large: %q does not run on a filled DB", name)
		}
	}
	return nil
}

// runChain is a large run's child: spec.Chain on one DB, each workload a
// measured phase (in res.Phases), the fill's debt drained before the next.
func runChain(spec childSpec) (result, error) {
	res := result{Engine: spec.Engine, Workload: "large", Repeat: spec.Repeat, N: spec.Params.N}
	if err := checkChain(spec.Chain); err != nil {
		return res, err
	}
	if err := checkKeySpace(spec.Params.N); err != nil {
		return res, err
	}
	lg := spec.Large
	if lg.Cgroup != "" {
		if err := os.WriteFile(filepath.Join(lg.Cgroup, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return res, fmt.Errorf("join memory cgroup: %w", err)
		}
	}
	err := withEngine(spec, func(e Engine) error {
		smp, err := startSampler(e, spec.Dir, lg.SampleEvery)
		if err != nil {
			return err
		}
		defer func() { res.Samples = smp.stop() }()
		for i, name := range spec.Chain {
			w, err := findWorkload(name)
			if err != nil {
				return err
			}
			if i == 1 && lg.Cgroup != "" && lg.MemLimit > 0 {
				if err := limitMemory(lg.Cgroup, lg.MemLimit); err != nil {
					return err
				}
			}
			smp.setPhase(name)
			ph := result{Engine: spec.Engine, Workload: name, Repeat: spec.Repeat, N: spec.Params.N}
			err = measure(&ph, e, w, spec)
			if err == nil && i == 0 {
				smp.setPhase("drain")
				err = drainPhase(&ph, e, lg.DrainLimit)
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", name, err)
				ph.Error = err.Error()
			}
			res.Phases = append(res.Phases, ph)
			if err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}

// drainPhase drains the fill's compaction debt and records in its result
// how long that took, what it left and wrote.
func drainPhase(fill *result, e Engine, limit time.Duration) error {
	before, err := readProcIO()
	if err != nil {
		return err
	}
	fill.DrainSeconds, fill.DebtAfterDrain = drain(e, limit)
	syscall.Sync()
	after, err := readProcIO()
	if err != nil {
		return err
	}
	fill.DrainWriteBytes = after.sub(before).WriteBytes
	return nil
}

// drain waits until the engine has no compaction debt and runs no
// compaction, or has run none for a second (Pebble counts the few L0
// files it leaves below its compaction threshold as debt, so its estimate
// need not reach zero once it is done), or limit has passed. It returns
// how long it waited and the debt the engine still estimates. An engine
// that reports no shape is not waited for.
func drain(e Engine, limit time.Duration) (seconds float64, debt int64) {
	sh, ok := e.(shaper)
	if !ok {
		return 0, -1
	}
	const poll, quietPolls = 100 * time.Millisecond, 10
	start, quiet := time.Now(), 0
	for {
		s := sh.Shape()
		if s.Compacting == 0 {
			quiet++
		} else {
			quiet = 0
		}
		if (s.Debt == 0 && s.Compacting == 0) || quiet >= quietPolls || time.Since(start) >= limit {
			return time.Since(start).Seconds(), s.Debt
		}
		time.Sleep(poll)
	}
}

// limitMemory sets the memory cgroup's limit, page cache included. The
// kernel reclaims down to it first; that can fail while pages are still
// being written back, so it is tried again for a while.
func limitMemory(cgroup string, limit int64) error {
	syscall.Sync()
	var err error
	for range 50 {
		err = os.WriteFile(filepath.Join(cgroup, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0)
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("limit the memory cgroup to %d bytes: %w", limit, err)
}

// memoryCgroupRoot is where cgroup v1 mounts its memory controller.
const memoryCgroupRoot = "/sys/fs/cgroup/memory"

// newMemoryCgroup makes an unlimited memory cgroup for one child and
// returns its path and a function that removes it once the child is gone.
func newMemoryCgroup(name string) (string, func(), error) {
	if _, err := os.Stat(filepath.Join(memoryCgroupRoot, "memory.limit_in_bytes")); err != nil {
		return "", nil, fmt.Errorf("-mem-limit needs the cgroup v1 memory controller at %s (or -mem-limit 0): %w", memoryCgroupRoot, err)
	}
	dir := filepath.Join(memoryCgroupRoot, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("make memory cgroup: %w", err)
	}
	remove := func() {
		// The child's exit takes a moment to reach the cgroup.
		for range 50 {
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return dir, remove, nil
}
