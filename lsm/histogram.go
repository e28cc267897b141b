package lsm

import "sync/atomic"

// Histogram is a snapshot of a distribution the DB records (see Metrics):
// how many observations fell at or below each bound, as a metrics
// exporter wants them. Counts[i] counts the observations in
// (Bounds[i-1], Bounds[i]]; the last element, Counts[len(Bounds)], those
// above every bound. Count is the sum of Counts and Sum the sum of the
// observed values, in the unit of Bounds.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// histogram records observations of an integer quantity into fixed
// buckets with atomic counters: recording never locks, so the commit path
// can afford it. Readers get a snapshot that may be a few observations
// behind a concurrent writer's, which metrics tolerate.
type histogram struct {
	bounds []int64 // ascending upper bounds, in the recorded unit
	scale  float64 // multiplies the recorded unit into the snapshot's
	counts []atomic.Uint64
	sum    atomic.Int64
}

func newHistogram(scale float64, bounds ...int64) *histogram {
	return &histogram{bounds: bounds, scale: scale, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// observe records v.
func (h *histogram) observe(v int64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(v)
}

// snapshot returns the histogram as it stands.
func (h *histogram) snapshot() Histogram {
	s := Histogram{
		Bounds: make([]float64, len(h.bounds)),
		Counts: make([]uint64, len(h.counts)),
		Sum:    float64(h.sum.Load()) * h.scale,
	}
	for i, b := range h.bounds {
		s.Bounds[i] = float64(b) * h.scale
	}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	return s
}

// newSyncLatencyHistogram records WAL fsync durations in nanoseconds and
// reports them in seconds: from 50 µs (a battery-backed or in-memory
// disk) to 2.5 s (a disk in trouble).
func newSyncLatencyHistogram() *histogram {
	const us, ms = 1_000, 1_000_000
	return newHistogram(1e-9,
		50*us, 100*us, 250*us, 500*us, 1*ms, 2500*us, 5*ms, 10*ms, 25*ms, 50*ms, 100*ms, 250*ms, 500*ms, 1000*ms, 2500*ms)
}

// newGroupSizeHistogram records how many commits one WAL fsync served.
func newGroupSizeHistogram() *histogram {
	return newHistogram(1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
}
