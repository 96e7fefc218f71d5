package group

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// memoryReturn hands back to the system what a node that went quiet holds
// for nothing. Left to the runtime, a quiet node keeps it: nothing
// allocates, so no collection runs until the forced one two minutes on,
// and the scavenger returns pages only above the heap goal of the last
// one. What it holds is the log cache's window of the burst before
// (logcache.go), and whatever the burst left since the last collection:
// after a restart with 5,000,000 queued, the replay of the log's tail left
// 226 MB uncollected on a node whose live heap was 5 MB. One for the
// process, whose heap it is: each group's log cache tells it when its log
// has gone quiet, and it collects when that frees least bytes or more, at
// most once in every.
type memoryReturn struct {
	least int64
	every time.Duration
	now   func() time.Time
	// reclaimable is what a collection would free or return besides
	// what the caches let go of; free collects and returns it.
	reclaimable func() int64
	free        func()

	mu   sync.Mutex
	last time.Time
}

// quietReturn is the process's memoryReturn for quiet logs (a large
// snapshot has its own, FSM.returnMemory): 8 MiB or more, at most
// every 10 s. A forced collection of a node's heap takes a few
// milliseconds of a core (the queues' records are outside it).
var quietReturn = &memoryReturn{least: 8 << 20, every: 10 * time.Second, now: time.Now,
	reclaimable: heapReclaimable, free: debug.FreeOSMemory}

// quiet is told that a log went quiet and its cache let go of freed bytes.
func (m *memoryReturn) quiet(freed int64) {
	m.mu.Lock()
	now := m.now()
	if (!m.last.IsZero() && now.Sub(m.last) < m.every) || freed+m.reclaimable() < m.least {
		m.mu.Unlock()
		return
	}
	m.last = now
	m.mu.Unlock()
	m.free()
}

// heapReclaimable is what was allocated since the last collection (all of
// it garbage, at most) and the free heap not yet returned to the system.
func heapReclaimable() int64 {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(s)
	for _, v := range s {
		if v.Value.Kind() != metrics.KindUint64 {
			return 0 // a runtime without them: the caches' bytes alone
		}
	}
	objects, live, free := s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
	return int64(objects-min(live, objects)) + int64(free)
}
