package server

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The metrics are written in Prometheus's text exposition format (0.0.4)
// by this file rather than by prometheus/client_golang: the server is a
// subcommand of the one jail binary, and that library's package
// initialisation (its default registry's collectors, protobuf descriptors,
// procfs) cost every `jail run` 0.63 to 0.78 ms (GODEBUG=inittrace=1, 22
// package inits) and 3.3 MB of binary, for four metrics. The test parses
// the output with the Prometheus project's own parser (expfmt).

// counterVec is a counter with labels.
type counterVec struct {
	name, help string
	labels     []string
	mu         sync.Mutex
	values     map[string]float64 // by the label values, joined by \x00
}

func newCounterVec(name, help string, labels ...string) *counterVec {
	return &counterVec{name: name, help: help, labels: labels, values: map[string]float64{}}
}

func (c *counterVec) inc(values ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.values[strings.Join(values, "\x00")]++
}

func (c *counterVec) write(w io.Writer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", c.name, escapeHelp(c.help), c.name)
	for _, k := range sortedKeys(c.values) {
		fmt.Fprintf(w, "%s%s %s\n", c.name, labelString(c.labels, strings.Split(k, "\x00"), "", ""), formatFloat(c.values[k]))
	}
}

// gauge is a value that goes up and down.
type gauge struct {
	name, help string
	mu         sync.Mutex
	v          float64
}

func (g *gauge) add(d float64) {
	g.mu.Lock()
	g.v += d
	g.mu.Unlock()
}

func (g *gauge) write(w io.Writer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", g.name, escapeHelp(g.help), g.name, g.name, formatFloat(g.v))
}

// histogramVec is a histogram with labels.
type histogramVec struct {
	name, help string
	labels     []string
	buckets    []float64 // upper bounds, ascending; +Inf is implied
	mu         sync.Mutex
	series     map[string]*histogram
}

type histogram struct {
	counts []uint64 // per bucket, not cumulative
	sum    float64
	count  uint64
}

func newHistogramVec(name, help string, buckets []float64, labels ...string) *histogramVec {
	return &histogramVec{name: name, help: help, labels: labels, buckets: buckets, series: map[string]*histogram{}}
}

// exponentialBuckets are count bounds from start, each factor times the last.
func exponentialBuckets(start, factor float64, count int) []float64 {
	b := make([]float64, count)
	for i := range b {
		b[i] = start * math.Pow(factor, float64(i))
	}
	return b
}

func (h *histogramVec) observe(v float64, values ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := strings.Join(values, "\x00")
	s := h.series[k]
	if s == nil {
		s = &histogram{counts: make([]uint64, len(h.buckets))}
		h.series[k] = s
	}
	if i, _ := slices.BinarySearch(h.buckets, v); i < len(h.buckets) {
		s.counts[i]++
	}
	s.sum += v
	s.count++
}

func (h *histogramVec) write(w io.Writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", h.name, escapeHelp(h.help), h.name)
	for _, k := range sortedKeys(h.series) {
		s, vals := h.series[k], strings.Split(k, "\x00")
		var cum uint64
		for i, b := range h.buckets {
			cum += s.counts[i]
			fmt.Fprintf(w, "%s_bucket%s %d\n", h.name, labelString(h.labels, vals, "le", formatFloat(b)), cum)
		}
		fmt.Fprintf(w, "%s_bucket%s %d\n", h.name, labelString(h.labels, vals, "le", "+Inf"), s.count)
		fmt.Fprintf(w, "%s_sum%s %s\n%s_count%s %d\n", h.name, labelString(h.labels, vals, "", ""), formatFloat(s.sum),
			h.name, labelString(h.labels, vals, "", ""), s.count)
	}
}

// labelString renders {name="value",...}, with one more label extra=v
// when extra is not empty.
func labelString(names, values []string, extra, v string) string {
	var parts []string
	for i, n := range names {
		if i < len(values) {
			parts = append(parts, n+"="+strconv.Quote(values[i]))
		}
	}
	if extra != "" {
		parts = append(parts, extra+"="+strconv.Quote(v))
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// metrics are the server's.
type metrics struct {
	requests *counterVec
	results  *counterVec
	duration *histogramVec
	inflight *gauge
	claims   *counterVec
	// extra writes more (the pools' gauges).
	extra func(io.Writer)
}

func newMetrics() *metrics {
	return &metrics{
		requests: newCounterVec("jail_http_requests_total", "HTTP requests answered, by route and status code.", "route", "code"),
		results: newCounterVec("jail_runs_total",
			"Runs (POST /v1/run) and session commands that ended, by kind (run, exec) and status (the result's, or error).", "kind", "status"),
		duration: newHistogramVec("jail_run_duration_seconds", "Wall time of runs and session commands as the server saw them, start to report.",
			exponentialBuckets(0.002, 2, 14), "kind"),
		inflight: &gauge{name: "jail_runs_in_flight", help: "Runs and session commands under way."},
		claims:   newCounterVec("jail_pool_claims_total", "Runs that named a warm pool, by pool and result (hit, miss: a cold start).", "pool", "result"),
	}
}

// ServeHTTP writes the metrics, and the process's goroutines and memory.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.requests.write(w)
	m.results.write(w)
	m.duration.write(w)
	m.inflight.write(w)
	m.claims.write(w)
	if m.extra != nil {
		m.extra(w)
	}
	fmt.Fprintf(w, "# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines %d\n", runtime.NumGoroutine())
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				fmt.Fprintf(w, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %d\n",
					pages*int64(os.Getpagesize()))
			}
		}
	}
}
