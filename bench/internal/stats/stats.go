// Package stats has the order statistics the bench tools report.
package stats

import (
	"math"
	"slices"
)

// Quantile returns the q-quantile of xs by linear interpolation between
// the closest ranks (type 7, as R's and NumPy's default), or NaN when xs
// is empty. It does not change xs.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return sortedQuantile(s, q)
}

func sortedQuantile(s []float64, q float64) float64 {
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// Tail describes a latency series by its middle and its right tail, the
// part a median hides: how slow the slowest runs were, and how many were
// slower than a limit.
type Tail struct {
	N             int
	P50, P99, Max float64
	// Over is how many samples are strictly above the limit given to
	// [Tails].
	Over int
}

// Tails returns xs's [Tail], counting the samples above limit. Its
// quantiles are NaN when xs is empty. It does not change xs.
func Tails(xs []float64, limit float64) Tail {
	t := Tail{N: len(xs), P50: math.NaN(), P99: math.NaN(), Max: math.NaN()}
	if len(xs) == 0 {
		return t
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	t.P50, t.P99, t.Max = sortedQuantile(s, 0.5), sortedQuantile(s, 0.99), s[len(s)-1]
	for _, x := range s {
		if x > limit {
			t.Over++
		}
	}
	return t
}

// Ratios returns num[i]/den[i] for every index both have: the per-round
// (or per-pair) ratios whose median the bench tools report, so that noise
// that hits both members of a pair cancels.
func Ratios(num, den []float64) []float64 {
	n := min(len(num), len(den))
	out := make([]float64, n)
	for i := range n {
		out[i] = num[i] / den[i]
	}
	return out
}
