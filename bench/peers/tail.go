package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"time"
)

// The tail subcommand asks where a fill's slowest sets lose their time:
// in the engine (a wait on a lock, a channel or a timer, which the kernel
// counts as a voluntary context switch of the thread), in the kernel (an
// involuntary switch: another thread took the CPU), in a page fault, or
// nowhere the guest can see (the thread ran, unswitched, and was slow:
// the host took the time, or the work did). The writer's goroutine is
// locked to its thread, and the thread's rusage is read around each set.
// A p99 that moves with the machine's noise rather than with the engine
// shows here as sets of the last kind.

// rusageThread is Linux's RUSAGE_THREAD, which package syscall does not
// name: the calling thread's usage.
const rusageThread = 1

// tailClass is what happened on the writer's thread during one set.
type tailClass int

const (
	tailUnseen       tailClass = iota // no switch, no fault
	tailBlocked                       // a voluntary switch: the set waited
	tailPreempted                     // an involuntary switch, no fault
	tailFaulted                       // a page fault, no switch
	tailPreemptFault                  // an involuntary switch and a fault
	tailClasses
)

func (c tailClass) String() string {
	return [...]string{"nothing the guest sees", "blocked (voluntary switch)", "preempted (involuntary switch)",
		"page fault", "preempted and page fault"}[c]
}

// tailReport is what tailFill measured over its window.
type tailReport struct {
	Lat        latency // every set of the window
	Slow       int64
	Count      [tailClasses]int64
	Time       [tailClasses]time.Duration
	FastFaults int64 // sets under the slow bound that faulted
	SlowBound  time.Duration
	Elapsed    time.Duration
}

// tailEngine is an Engine whose sets, from the from-th on, tailFill
// times and classifies by the rusage of the calling thread around them.
type tailEngine struct {
	Engine
	from, seen int
	rep        *tailReport
}

func (t *tailEngine) Set(key, value []byte, sync bool) error {
	var before, after syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &before); err != nil {
		return fmt.Errorf("getrusage: %w", err)
	}
	start := time.Now()
	err := t.Engine.Set(key, value, sync)
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

// observe counts one set of the window that took d, with the thread's
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

// tailFill runs the engine suite's fillrandom of n keys on e, and
// classifies the sets from the from-th on that take longer than slow.
func tailFill(e Engine, n, from int, slow time.Duration, seed uint64) (tailReport, error) {
	if from < 0 || from >= n {
		return tailReport{}, fmt.Errorf("-from %d: want 0 <= from < n (%d)", from, n)
	}
	// The fill runs on this goroutine: its thread is the one measured.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rep := tailReport{SlowBound: slow}
	began := time.Now()
	if _, err := runFillRandom(&tailEngine{Engine: e, from: from, rep: &rep}, params{N: n, Seed: seed}); err != nil {
		return tailReport{}, err
	}
	rep.Elapsed = time.Since(began)
	return rep, nil
}

func (r tailReport) write(w io.Writer, engine string) {
	fmt.Fprintf(w, "%s: %d sets measured (of a fill taking %v): p50 %v, p99 %v, p99.9 %v\n",
		engine, r.Lat.n, r.Elapsed.Round(time.Millisecond), r.Lat.quantile(0.5), r.Lat.quantile(0.99), r.Lat.quantile(0.999))
	fmt.Fprintf(w, "%d sets over %v (%.2f%%); what their thread went through:\n", r.Slow, r.SlowBound,
		100*float64(r.Slow)/float64(max(r.Lat.n, 1)))
	for c := range tailClasses {
		if r.Count[c] == 0 {
			continue
		}
		fmt.Fprintf(w, "  %-32s %8d sets, %9.1f ms, %8.1f µs each\n", c, r.Count[c],
			float64(r.Time[c])/1e6, float64(r.Time[c])/float64(r.Count[c])/1e3)
	}
	fmt.Fprintf(w, "faster sets with a page fault: %d\n", r.FastFaults)
}

// runTail is the tail subcommand.
func runTail(args []string, stdout, log io.Writer) error {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	fs.SetOutput(log)
	engine := fs.String("engine", "tabula", "engine to fill: "+fmt.Sprint(knownEngines()))
	n := fs.Int("n", 3_000_000, "keys to fill")
	from := fs.Int("from", -1, "measure the sets from this one on (default: n/3, past the young DB's small memtables)")
	slow := fs.Duration("slow", 20*time.Microsecond, "classify the sets slower than this")
	seed := fs.Uint64("seed", 1, "key order and values")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n <= 0 || *slow < 0 {
		return errors.New("tail: -n must be positive and -slow not negative")
	}
	if *from < 0 {
		*from = *n / 3
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
	rep, err := tailFill(e, *n, *from, *slow, *seed)
	if cerr := e.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	rep.write(stdout, *engine)
	return nil
}
