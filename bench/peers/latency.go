package main

import (
	"math/bits"
	"time"
)

// latency is a histogram of operation latencies: log-linear buckets (32 per
// power of two of nanoseconds), so any quantile is read within 3.125% of
// its value, at a cost of one clock read and one increment per operation.
// (Eight buckets, 12.5%, made two engines' p99s one bucket apart read as
// a ratio of 1.11 or 1.30 when they were closer.)
type latency struct {
	counts [64 * latencySub]uint64
	n      uint64
	max    time.Duration
}

const (
	latencySubBits = 5
	latencySub     = 1 << latencySubBits // buckets per power of two
)

func latencyBucket(d time.Duration) int {
	v := uint64(max(d, 1))
	exp := bits.Len64(v) - 1 // v in [2^exp, 2^(exp+1))
	if exp < latencySubBits {
		return int(v) // the first latencySub nanoseconds get a bucket each
	}
	sub := (v >> (exp - latencySubBits)) & (latencySub - 1)
	return exp*latencySub + int(sub)
}

// bucketUpper is the largest latency of bucket i.
func bucketUpper(i int) time.Duration {
	exp, sub := i/latencySub, i%latencySub
	if exp < latencySubBits {
		return time.Duration(i)
	}
	lo := uint64(1)<<exp | uint64(sub)<<(exp-latencySubBits)
	return time.Duration(lo + uint64(1)<<(exp-latencySubBits) - 1)
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
