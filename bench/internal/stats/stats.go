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
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}
