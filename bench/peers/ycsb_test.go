package main

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestScrambledZipfian checks the YCSB key distribution: every draw is in
// range, the most popular item takes about 1/zeta(n) of the draws (13% for
// 1,000 items at theta 0.99), the most popular tenth of the items most of
// them, and the popular items are not bunched at the start of the space.
func TestScrambledZipfian(t *testing.T) {
	const n, draws = 1000, 200_000
	z := newScrambledZipfian(n, 0.99)
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, n)
	for range draws {
		i := z.next(rng)
		if i < 0 || i >= n {
			t.Fatalf("draw %d out of [0, %d)", i, n)
		}
		counts[i]++
	}
	top := slices.Index(counts, slices.Max(counts))
	if share := float64(counts[top]) / draws; share < 0.10 || share > 0.17 {
		t.Fatalf("the most popular item took %.3f of the draws, want about 1/zeta(1000) = 0.134", share)
	}
	sorted := slices.Sorted(slices.Values(counts))
	slices.Reverse(sorted)
	tenth := 0
	for _, c := range sorted[:n/10] {
		tenth += c
	}
	if share := float64(tenth) / draws; share < 0.5 {
		t.Fatalf("the most popular tenth took %.3f of the draws, want most", share)
	}
	first := 0
	for _, c := range counts[:n/10] {
		first += c
	}
	if share := float64(first) / draws; share > 0.4 {
		t.Fatalf("the first tenth of the key space took %.3f of the draws: the ranks are not scrambled", share)
	}
}
