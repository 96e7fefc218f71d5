package main

import (
	"testing"
	"time"
)

func TestSummarize_NearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // 1..100 ms, shuffled order does not matter
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := summarize(ds)
	if s.Count != 100 || s.P50 != 50 || s.P95 != 95 || s.P99 != 99 || s.P999 != 100 || s.Max != 100 {
		t.Fatalf("summary = %+v", s)
	}
	for i := 101; i <= 2000; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if s := summarize(ds); s.P99 != 1980 || s.P999 != 1998 || s.Max != 2000 {
		t.Fatalf("summary of 2,000 = %+v", s)
	}
	if z := summarize(nil); z != (summary{}) {
		t.Fatalf("empty summary = %+v", z)
	}
	if one := summarize([]time.Duration{7 * time.Millisecond}); one.P50 != 7 || one.P99 != 7 {
		t.Fatalf("single summary = %+v", one)
	}
}

func TestLatencies_BoundedButCounted(t *testing.T) {
	l := newLatencies(10)
	for i := 0; i < 1000; i++ {
		l.add(time.Millisecond)
	}
	s := l.summary()
	if s.Count != 1000 || len(l.samples) != 10 || s.P99 != 1 {
		t.Fatalf("count %d kept %d p99 %v", s.Count, len(l.samples), s.P99)
	}
}

func TestConfirmGaps_Longest(t *testing.T) {
	var g confirmGaps
	t0 := time.Unix(100, 0)
	for _, d := range []time.Duration{0, 10 * time.Millisecond, 2 * time.Second, 2100 * time.Millisecond, time.Second /* late report of an earlier confirm */} {
		g.mark(t0.Add(d))
	}
	if got := g.max(); got != 1990*time.Millisecond {
		t.Fatalf("longest gap %v, want 1.99s", got)
	}
}
