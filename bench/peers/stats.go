package main

import (
	"math"
	"slices"
)

// median returns the median of xs (the mean of the middle two for an even
// count), ignoring NaNs; NaN if nothing is left. The median, not the mean,
// because one repeat disturbed by another tenant's disk burst should not
// move the figure.
func median(xs []float64) float64 {
	s := slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// ratio returns a/b, or NaN when b is zero or either is NaN: a ratio to
// nothing is not a number the report should print as one.
func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// pairRatios returns a[i]/b[i] for each repeat both have; a repeat missing
// on either side (a failed run) is NaN.
func pairRatios(a, b []float64) []float64 {
	out := make([]float64, max(len(a), len(b)))
	for i := range out {
		out[i] = math.NaN()
		if i < len(a) && i < len(b) {
			out[i] = ratio(a[i], b[i])
		}
	}
	return out
}

// percentile returns the p-th percentile (0 < p <= 100) of xs by the
// nearest-rank method: the smallest value with at least p% of the values
// at or below it. NaN for no values. xs is sorted in place.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	rank := int(math.Ceil(p / 100 * float64(len(xs))))
	return xs[min(max(rank, 1), len(xs))-1]
}
