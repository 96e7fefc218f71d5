package main

import (
	"math"
	"slices"
	"sync"
	"time"
)

// latencies collects durations; percentiles are exact over what was kept.
// At most max samples are kept (every k-th once full), which bounds memory
// on long runs while keeping the distribution.
type latencies struct {
	mu      sync.Mutex
	samples []time.Duration
	max     int
	seen    int
}

func newLatencies(max int) *latencies { return &latencies{max: max} }

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen++
	if len(l.samples) < l.max {
		l.samples = append(l.samples, d)
		return
	}
	// Full: keep one in every (seen/max) by overwriting round-robin.
	if l.seen%((l.seen/l.max)+1) == 0 {
		l.samples[l.seen%l.max] = d
	}
}

// summary is the percentiles of a set of durations.
type summary struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

func (l *latencies) summary() summary {
	l.mu.Lock()
	s := slices.Clone(l.samples)
	seen := l.seen
	l.mu.Unlock()
	out := summarize(s)
	out.Count = seen
	return out
}

// summarize returns nearest-rank percentiles of ds in milliseconds.
func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	slices.Sort(ds)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ds[max(0, min(i, len(ds)-1))]
	}
	return summary{Count: len(ds), P50: ms(rank(0.50)), P95: ms(rank(0.95)), P99: ms(rank(0.99)), P999: ms(rank(0.999)), Max: ms(ds[len(ds)-1])}
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
