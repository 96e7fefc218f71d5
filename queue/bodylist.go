package queue

import (
	"cmp"
	"runtime"
	"slices"
)

// SortedBodies sorts s by the place in the log of the body that key
// names, (Index, Pos), and drops repeats: the order in which a snapshot's
// list of bodies is written, read and relocated. A backlog's list is
// usually in that order already (its messages were published in log
// order), and is then only checked, not sorted: at 5,000,000 messages the
// sort was most of the snapshot goroutine's time before the state was
// written at all.
func SortedBodies[T any](s []T, key func(T) Body) []T {
	order := func(a, b T) int {
		x, y := key(a), key(b)
		if c := cmp.Compare(x.Index, y.Index); c != 0 {
			return c
		}
		return cmp.Compare(x.Pos, y.Pos)
	}
	if !slices.IsSortedFunc(s, order) {
		slices.SortFunc(s, order)
	}
	return slices.CompactFunc(s, func(a, b T) bool {
		x, y := key(a), key(b)
		return x.Index == y.Index && x.Pos == y.Pos
	})
}

// paceEvery is how many steps of a long walk go between two yields: a few
// hundred microseconds of encoding.
const paceEvery = 4096

// Pace has a long walk over captured messages (a snapshot's encoding and
// listing, millions of steps on raft's snapshot goroutine) yield the
// processor every paceEvery steps. Go's scheduler preempts a running
// goroutine only after 10 ms, and a delivery passes through several
// goroutines on its way from the log to the socket, each of which would
// otherwise wait that long for a processor the walk holds (two cores, one
// of them taken by the collector's mark worker while the walk allocates).
// The zero Pace is ready.
type Pace struct{ n int }

// Step counts one step of the walk.
func (p *Pace) Step() {
	if p.n++; p.n >= paceEvery {
		p.n = 0
		runtime.Gosched()
	}
}
