package stats

import (
	"math"
	"testing"
)

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"median of odd count", []float64{3, 1, 2}, 0.5, 2},
		{"median of even count interpolates", []float64{4, 1, 3, 2}, 0.5, 2.5},
		{"p0 is the minimum", []float64{5, 2, 9}, 0, 2},
		{"p100 is the maximum", []float64{5, 2, 9}, 1, 9},
		{"p90 of 1..11", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.9, 10},
		{"one sample", []float64{7}, 0.99, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quantile(tc.xs, tc.q); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("empty is NaN", func(t *testing.T) {
		if got := Quantile(nil, 0.5); !math.IsNaN(got) {
			t.Errorf("got %v, want NaN", got)
		}
	})
}
