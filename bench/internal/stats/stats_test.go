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

func TestTails(t *testing.T) {
	xs := make([]float64, 0, 200)
	for i := 200; i >= 1; i-- { // 200..1: Tails must not rely on order
		xs = append(xs, float64(i))
	}
	for _, tc := range []struct {
		name  string
		xs    []float64
		limit float64
		want  Tail
	}{
		{"1..200, limit 100", xs, 100, Tail{N: 200, P50: 100.5, P99: 198.01, Max: 200, Over: 100}},
		{"a sample at the limit is not over", []float64{3, 100, 1}, 100, Tail{N: 3, P50: 3, P99: 98.06, Max: 100, Over: 0}},
		{"one sample", []float64{150}, 100, Tail{N: 1, P50: 150, P99: 150, Max: 150, Over: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Tails(tc.xs, tc.limit)
			if got.N != tc.want.N || got.Over != tc.want.Over || !near(got.P50, tc.want.P50) ||
				!near(got.P99, tc.want.P99) || got.Max != tc.want.Max {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("input left as it was", func(t *testing.T) {
		in := []float64{3, 1, 2}
		Tails(in, 0)
		if in[0] != 3 || in[1] != 1 || in[2] != 2 {
			t.Errorf("got %v, want [3 1 2]", in)
		}
	})
	t.Run("empty has NaN quantiles", func(t *testing.T) {
		got := Tails(nil, 100)
		if got.N != 0 || got.Over != 0 || !math.IsNaN(got.P50) || !math.IsNaN(got.P99) || !math.IsNaN(got.Max) {
			t.Errorf("got %+v, want zero counts and NaN quantiles", got)
		}
	})
}

func TestRatios(t *testing.T) {
	for _, tc := range []struct {
		name     string
		num, den []float64
		want     []float64
	}{
		{"pairwise", []float64{2, 9, 4}, []float64{1, 3, 8}, []float64{2, 3, 0.5}},
		{"the shorter series bounds it", []float64{2, 9, 4}, []float64{1}, []float64{2}},
		{"empty", nil, []float64{1}, []float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Ratios(tc.num, tc.den)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("got %v, want %v", got, tc.want)
					break
				}
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
