package queue

import (
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
)

func TestSortedBodies_SortsAndDropsRepeats(t *testing.T) {
	key := func(b Body) Body { return b }
	cases := []struct {
		name     string
		in, want []Body
	}{
		{"empty", nil, nil},
		{"in order", []Body{{1, 0, 5}, {1, 1, 5}, {2, 0, 5}}, []Body{{1, 0, 5}, {1, 1, 5}, {2, 0, 5}}},
		{"in order with a repeat", []Body{{1, 0, 5}, {1, 0, 5}, {3, 2, 5}}, []Body{{1, 0, 5}, {3, 2, 5}}},
		{"two runs", []Body{{5, 0, 1}, {6, 0, 1}, {1, 3, 1}, {2, 0, 1}}, []Body{{1, 3, 1}, {2, 0, 1}, {5, 0, 1}, {6, 0, 1}}},
		{"positions out of order", []Body{{4, 2, 1}, {4, 1, 1}, {4, 2, 1}}, []Body{{4, 1, 1}, {4, 2, 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := SortedBodies(slices.Clone(c.in), key)
			if !slices.Equal(got, c.want) {
				t.Fatalf("SortedBodies(%v) = %v, want %v", c.in, got, c.want)
			}
		})
	}
}

// A paced walk lets another goroutine run while it goes, on one
// processor, long before the scheduler's 10 ms preemption would.
func TestPace_YieldsDuringAWalk(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Bool
	started := make(chan struct{})
	go func() {
		close(started)
		ran.Store(true)
	}()
	var pace Pace
	sawIt := false
	// The goroutine above is runnable, not running: this one holds the
	// only processor until it yields.
	for i := 0; i < 4*paceEvery && !sawIt; i++ {
		pace.Step()
		sawIt = ran.Load()
	}
	<-started
	if !sawIt {
		t.Fatalf("a walk of %d steps never let a runnable goroutine run", 4*paceEvery)
	}
}
