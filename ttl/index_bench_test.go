package ttl

import (
	"math/rand"
	"runtime"
	"testing"
)

// mixedDeadlines returns n deadlines for ids 0..n-1 enqueued at 50,000
// messages a second: half with a 1 s TTL, 30% with 60 s, 20% with a random
// TTL up to an hour (so short TTLs sit behind long ones).
func mixedDeadlines(n int) []int64 {
	rng := rand.New(rand.NewSource(1))
	out := make([]int64, n)
	for i := range out {
		enq := int64(1_700_000_000_000) + int64(i)/50
		var ttl int64
		switch r := rng.Intn(10); {
		case r < 5:
			ttl = 1000
		case r < 8:
			ttl = 60000
		default:
			ttl = rng.Int63n(3_600_000)
		}
		out[i] = enq + ttl
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkIndexPushPopDue1M pushes 1,000,000 entries with mixed deadlines
// then pops them all with one PopDue; one op is the whole round. It also
// reports the time per entry (one push and one pop) and the live heap the
// full index holds, in bytes per entry (measured in the first round).
func BenchmarkIndexPushPopDue1M(b *testing.B) {
	const n = 1_000_000
	ds := mixedDeadlines(n)
	b.ReportAllocs()
	var perEntry float64
	for i := 0; i < b.N; i++ {
		var x Index
		var before uint64
		if i == 0 {
			b.StopTimer()
			before = heapInUse()
			b.StartTimer()
		}
		for id, d := range ds {
			x.Push(uint64(id), d)
		}
		if i == 0 {
			b.StopTimer()
			perEntry = float64(heapInUse()-before) / n
			b.StartTimer()
		}
		if got := x.PopDue(1<<62, nil); got != n {
			b.Fatalf("popped %d", got)
		}
	}
	b.ReportMetric(perEntry, "B/entry")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/entry")
}

// BenchmarkIndexChurn keeps 100,000 entries live: each op removes one entry
// (as a consumer takes a message) and pushes a new one.
func BenchmarkIndexChurn(b *testing.B) {
	const live = 100_000
	ds := mixedDeadlines(live)
	var x Index
	for id, d := range ds {
		x.Push(uint64(id), d)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x.Remove(uint64(i))
		x.Push(uint64(i+live), ds[i%live]+int64(i))
	}
}

// BenchmarkIndexClone clones an index of 500,000 entries, as a queue
// with that many messages with a deadline does at its first change while
// a snapshot shares its index (queue/cow.go).
func BenchmarkIndexClone(b *testing.B) {
	var x Index
	for i, d := range mixedDeadlines(500_000) {
		x.Push(uint64(i+1), d)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := x.Clone()
		if c.Len() != x.Len() {
			b.Fatal("clone lost entries")
		}
	}
}
