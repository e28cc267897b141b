package main

import (
	"math/bits"
	"time"
)

// latency is a histogram of operation latencies: log-linear buckets (8 per
// power of two of nanoseconds), so any quantile is read within 12.5% of
// its value, at a cost of one clock read and one increment per operation.
type latency struct {
	counts [64 * latencySub]uint64
	n      uint64
	max    time.Duration
}

const latencySub = 8 // buckets per power of two

func latencyBucket(d time.Duration) int {
	v := uint64(max(d, 1))
	exp := bits.Len64(v) - 1 // v in [2^exp, 2^(exp+1))
	if exp < 3 {
		return int(v) // the first 8 nanoseconds get a bucket each
	}
	sub := (v >> (exp - 3)) & (latencySub - 1)
	return exp*latencySub + int(sub)
}

// bucketUpper is the largest latency of bucket i.
func bucketUpper(i int) time.Duration {
	exp, sub := i/latencySub, i%latencySub
	if exp < 1 {
		return time.Duration(i)
	}
	lo := uint64(1)<<exp | uint64(sub)<<(exp-3)
	return time.Duration(lo + uint64(1)<<(exp-3) - 1)
}

func (l *latency) record(d time.Duration) {
	l.counts[latencyBucket(d)]++
	l.n++
	l.max = max(l.max, d)
}

// since records the time since start.
func (l *latency) since(start time.Time) { l.record(time.Since(start)) }

func (l *latency) merge(o *latency) {
	for i, c := range o.counts {
		l.counts[i] += c
	}
	l.n += o.n
	l.max = max(l.max, o.max)
}

// quantile returns the q-quantile (0 < q ≤ 1), as its bucket's upper
// bound (the maximum seen, for the last bucket).
func (l *latency) quantile(q float64) time.Duration {
	if l.n == 0 {
		return 0
	}
	rank := uint64(q*float64(l.n) + 0.5)
	rank = min(max(rank, 1), l.n)
	var seen uint64
	for i, c := range l.counts {
		seen += c
		if seen >= rank {
			return min(bucketUpper(i), l.max)
		}
	}
	return l.max
}
