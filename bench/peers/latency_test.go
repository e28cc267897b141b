package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestLatencyQuantiles checks the histogram against exact quantiles of a
// spread of latencies: within its bucket width (3.125%), never below the
// exact value, and the maximum exact.
func TestLatencyQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var l latency
	var all []time.Duration
	for range 100_000 {
		d := time.Duration(rng.ExpFloat64() * float64(20*time.Microsecond))
		if rng.IntN(1000) == 0 {
			d += 30 * time.Millisecond // rare stalls
		}
		l.record(d)
		all = append(all, d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := all[int(q*float64(len(all)))-1]
		got := l.quantile(q)
		if got < exact || float64(got) > float64(exact)*1.032+32 {
			t.Fatalf("q%.3f: %v, exact %v", q, got, exact)
		}
	}
	if l.quantile(1) != all[len(all)-1] || l.max != all[len(all)-1] {
		t.Fatalf("max %v, quantile(1) %v, exact %v", l.max, l.quantile(1), all[len(all)-1])
	}
	var m latency
	m.merge(&l)
	m.merge(&l)
	if m.n != 2*l.n || m.quantile(0.5) != l.quantile(0.5) {
		t.Fatalf("merged: n %d, p50 %v; want %d, %v", m.n, m.quantile(0.5), 2*l.n, l.quantile(0.5))
	}
}
