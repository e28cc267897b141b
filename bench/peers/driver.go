package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// loadOp is one operation of a load: it returns how many entities it
// moved and whether the service answered with success; err says why not
// (a failure to talk to the service, or its refusal). A failed operation
// (not ok, or err) moved nothing: drive counts it as an error and not its
// entities.
type loadOp func(worker, i int) (entities int, ok bool, err error)

// loadResult is what drive measured.
type loadResult struct {
	ops, entities, errors int64
	seconds               float64
	p50, p95, p99         float64 // milliseconds
	firstErr              error   // the first failure's description
}

// run is the svcRun of a measured phase. Its Error is set only when no
// operation succeeded (nothing was measured); FirstError describes the
// first failure of a phase that had some.
func (r loadResult) run(system, workload string, repeat int) svcRun {
	run := svcRun{System: system, Workload: workload, Repeat: repeat, Ops: r.ops, Entities: r.entities, Errors: r.errors,
		Seconds: r.seconds, P50: num(r.p50), P95: num(r.p95), P99: num(r.p99)}
	if r.errors > 0 {
		msg := "an operation failed"
		if r.firstErr != nil {
			msg = r.firstErr.Error()
		}
		run.FirstError = msg
		if r.errors >= r.ops {
			run.Error = "every operation failed: " + msg
		}
	}
	return run
}

// drive runs op from workers goroutines until maxOps operations in all
// (0: no limit) or dur have passed, whichever is first, and at least one
// operation per worker. Every failure is counted, none is retried.
func drive(workers int, dur time.Duration, maxOps int, op loadOp) loadResult {
	var (
		next     atomic.Int64
		entities atomic.Int64
		errs     atomic.Int64
		mu       sync.Mutex
		lat      []float64
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(dur)
	for w := range workers {
		wg.Go(func() {
			var mine []float64
			for n := 0; ; n++ {
				i := int(next.Add(1) - 1)
				if (maxOps > 0 && i >= maxOps) || (n > 0 && dur > 0 && time.Now().After(deadline)) {
					break
				}
				t0 := time.Now()
				e, ok, err := op(w, i)
				mine = append(mine, float64(time.Since(t0))/float64(time.Millisecond))
				if err == nil && ok {
					entities.Add(int64(e))
				} else {
					errs.Add(1)
					if err == nil {
						err = fmt.Errorf("operation %d failed", i)
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	r := loadResult{ops: int64(len(lat)), entities: entities.Load(), errors: errs.Load(),
		seconds: time.Since(start).Seconds(), firstErr: firstErr}
	r.p50, r.p95, r.p99 = percentile(lat, 50), percentile(lat, 95), percentile(lat, 99)
	return r
}
