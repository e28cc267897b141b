package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"syscall"
	"time"
)

// The tail subcommand asks where a write workload's slowest operations
// (sets, or batches' applies) lose their time:
// in the engine (a wait on a lock, a channel or a timer, which the kernel
// counts as a voluntary context switch of the thread), in the kernel (an
// involuntary switch: another thread took the CPU), in a page fault, or
// nowhere the guest can see (the thread ran, unswitched, and was slow:
// the host took the time, or the work did). The writer's goroutine is
// locked to its thread, and the thread's rusage is read around each
// operation.
// A p99 that moves with the machine's noise rather than with the engine
// shows here as operations of the last kind.
//
// The lock has a price in what "blocked" counts: a locked goroutine that
// Go's scheduler preempts, to run another on its P, leaves its thread
// asleep until it runs again (stoplockedm), a voluntary switch too. In a
// 1M-key batch100, over half of the writer thread's voluntary switches
// were such preemptions (perf's sched_switch stacks); the engine's own
// waits are the rest, and its counters, printed after the classes, say
// how many of those were paced or slowed writes and stalls.

// rusageThread is Linux's RUSAGE_THREAD, which package syscall does not
// name: the calling thread's usage.
const rusageThread = 1

// tailClass is what happened on the writer's thread during one operation.
type tailClass int

const (
	tailUnseen       tailClass = iota // no switch, no fault
	tailBlocked                       // a voluntary switch: the operation waited
	tailPreempted                     // an involuntary switch, no fault
	tailFaulted                       // a page fault, no switch
	tailPreemptFault                  // an involuntary switch and a fault
	tailClasses
)

func (c tailClass) String() string {
	return [...]string{"nothing the guest sees", "blocked (voluntary switch)", "preempted (involuntary switch)",
		"page fault", "preempted and page fault"}[c]
}

// tailReport is what tailRun measured over its window.
type tailReport struct {
	Lat        latency // every operation of the window
	Slow       int64
	Count      [tailClasses]int64
	Time       [tailClasses]time.Duration
	FastFaults int64 // operations under the slow bound that faulted
	SlowBound  time.Duration
	Elapsed    time.Duration
}

// tailEngine is an Engine whose operations (sets, and batches' applies),
// from the from-th on, tailRun times and classifies by the rusage of the
// calling thread around them.
type tailEngine struct {
	Engine
	from, seen int
	rep        *tailReport
}

func (t *tailEngine) Set(key, value []byte, sync bool) error {
	return t.measure(func() error { return t.Engine.Set(key, value, sync) })
}

func (t *tailEngine) NewBatch() Batch { return tailBatch{Batch: t.Engine.NewBatch(), t: t} }

// tailBatch is a batch whose Apply its tailEngine measures.
type tailBatch struct {
	Batch
	t *tailEngine
}

func (b tailBatch) Apply(sync bool) error {
	return b.t.measure(func() error { return b.Batch.Apply(sync) })
}

func (t *tailEngine) measure(op func() error) error {
	var before, after syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &before); err != nil {
		return fmt.Errorf("getrusage: %w", err)
	}
	start := time.Now()
	err := op()
	d := time.Since(start)
	if err != nil {
		return err
	}
	if err := syscall.Getrusage(rusageThread, &after); err != nil {
		return fmt.Errorf("getrusage: %w", err)
	}
	if t.seen++; t.seen > t.from {
		t.rep.observe(d, &before, &after)
	}
	return nil
}

// observe counts one operation of the window that took d, with the thread's
// rusage before and after it.
func (r *tailReport) observe(d time.Duration, before, after *syscall.Rusage) {
	r.Lat.record(d)
	faulted := after.Minflt+after.Majflt > before.Minflt+before.Majflt
	if d <= r.SlowBound {
		if faulted {
			r.FastFaults++
		}
		return
	}
	c := tailUnseen
	switch preempted := after.Nivcsw > before.Nivcsw; {
	case after.Nvcsw > before.Nvcsw:
		c = tailBlocked
	case preempted && faulted:
		c = tailPreemptFault
	case preempted:
		c = tailPreempted
	case faulted:
		c = tailFaulted
	}
	r.Slow++
	r.Count[c]++
	r.Time[c] += d
}

// tailWorkloads are the engine suite's workloads tail runs: those that
// write from one goroutine, the one measured. A prefilled one's prefill
// is not measured.
var tailWorkloads = []string{"fillrandom", "overwrite", "batch100"}

// tailOps is how many operations workload does on n keys.
func tailOps(workload string, n int) int {
	if workload == "batch100" {
		return (n + batchSize - 1) / batchSize
	}
	return n
}

// tailRun runs workload on n keys of e, as the engine suite does, and
// classifies its operations from the from-th on that take longer than
// slow.
func tailRun(e Engine, workload string, n, from int, slow time.Duration, seed uint64) (tailReport, error) {
	if !slices.Contains(tailWorkloads, workload) {
		return tailReport{}, fmt.Errorf("-workload %q: want one of %v", workload, tailWorkloads)
	}
	w, err := findWorkload(workload)
	if err != nil {
		return tailReport{}, err
	}
	if ops := tailOps(workload, n); from < 0 || from >= ops {
		return tailReport{}, fmt.Errorf("-from %d: want 0 <= from < %d, the workload's operations", from, ops)
	}
	p := params{N: n, Seed: seed}
	if w.Prefill {
		if err := prefill(e, p); err != nil {
			return tailReport{}, fmt.Errorf("prefill: %w", err)
		}
	}
	// The workload runs on this goroutine: its thread is the one measured.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rep := tailReport{SlowBound: slow}
	began := time.Now()
	if _, err := w.Run(&tailEngine{Engine: e, from: from, rep: &rep}, p); err != nil {
		return tailReport{}, err
	}
	rep.Elapsed = time.Since(began)
	return rep, nil
}

func (r tailReport) write(w io.Writer, engine, workload string) {
	fmt.Fprintf(w, "%s %s: %d ops measured (of a run taking %v): p50 %v, p99 %v, p99.9 %v\n",
		engine, workload, r.Lat.n, r.Elapsed.Round(time.Millisecond), r.Lat.quantile(0.5), r.Lat.quantile(0.99), r.Lat.quantile(0.999))
	fmt.Fprintf(w, "%d ops over %v (%.2f%%); what their thread went through:\n", r.Slow, r.SlowBound,
		100*float64(r.Slow)/float64(max(r.Lat.n, 1)))
	for c := range tailClasses {
		if r.Count[c] == 0 {
			continue
		}
		fmt.Fprintf(w, "  %-32s %8d ops, %9.1f ms, %8.1f µs each\n", c, r.Count[c],
			float64(r.Time[c])/1e6, float64(r.Time[c])/float64(r.Count[c])/1e3)
	}
	fmt.Fprintf(w, "faster ops with a page fault: %d\n", r.FastFaults)
}

// runTail is the tail subcommand.
func runTail(args []string, stdout, log io.Writer) error {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	fs.SetOutput(log)
	engine := fs.String("engine", "tabula", "engine to run: "+fmt.Sprint(knownEngines()))
	workload := fs.String("workload", "fillrandom", "workload to run: "+fmt.Sprint(tailWorkloads)+" (an operation of batch100 is a batch's apply)")
	n := fs.Int("n", 3_000_000, "keys to fill")
	from := fs.Int("from", -1, "measure the operations from this one on (default: a third of them, past the young DB's small memtables)")
	slow := fs.Duration("slow", 20*time.Microsecond, "classify the operations slower than this")
	seed := fs.Uint64("seed", 1, "key order and values")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n <= 0 || *slow < 0 {
		return errors.New("tail: -n must be positive and -slow not negative")
	}
	if *from < 0 {
		*from = tailOps(*workload, *n) / 3
	}
	dir, err := os.MkdirTemp("", "peers-tail-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e, err := openEngine(*engine, dir, defaultEngineConfig())
	if err != nil {
		return err
	}
	rep, err := tailRun(e, *workload, *n, *from, *slow, *seed)
	stats := e.Stats() // the engine's own account of its waits
	if cerr := e.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	rep.write(stdout, *engine, *workload)
	if s, ok := stats.(fmt.Stringer); ok {
		fmt.Fprintf(stdout, "%s's counters at the end:\n%s", *engine, s)
	} else if b, err := json.MarshalIndent(stats, "", "  "); err == nil {
		fmt.Fprintf(stdout, "%s's counters at the end:\n%s\n", *engine, b)
	}
	return nil
}
