package group

import (
	"testing"

	"github.com/hashicorp/raft"
)

// countingStore counts the reads that reach the store.
type countingStore struct {
	*raft.InmemStore
	reads int
}

func (s *countingStore) GetLog(index uint64, l *raft.Log) error {
	s.reads++
	return s.InmemStore.GetLog(index, l)
}

// The cache serves recent entries within its byte budget, the newest
// first, and never holds an entry kept out of line.
func TestLogCache_KeepsRecentEntriesWithinItsBudget(t *testing.T) {
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newLogCache(8, 3<<10, store)
	put := func(index uint64, n int) {
		t.Helper()
		if err := c.StoreLogs([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: make([]byte, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	cached := func(index uint64) bool {
		t.Helper()
		before := store.reads
		var l raft.Log
		if err := c.GetLog(index, &l); err != nil || l.Index != index {
			t.Fatalf("entry %d: %v", index, err)
		}
		return store.reads == before
	}
	for i := uint64(1); i <= 4; i++ {
		put(i, 1<<10)
	}
	// 4 KiB written, 3 KiB kept: the oldest went.
	if cached(1) || !cached(2) || !cached(4) {
		t.Fatalf("cached: 1 %v 2 %v 4 %v; want the newest three", cached(1), cached(2), cached(4))
	}
	put(5, inlineMax+1)
	// The newest entry is read for its term on every commit timeout,
	// whatever its size: kept while it is the newest.
	if !cached(5) || !cached(5) {
		t.Fatal("the newest entry, over inlineMax, is read from the store")
	}
	put(6, 10)
	if cached(5) {
		t.Fatal("an entry over inlineMax is cached once a later one came")
	}
	// Read back from the store, it is kept only while it is the log's last.
	if cached(5) || cached(5) {
		t.Fatal("an older entry over inlineMax is kept after a read")
	}
	for i := uint64(7); i <= 20; i++ { // the ring wraps
		put(i, 10)
	}
	if !cached(20) || !cached(13) || cached(12) {
		t.Fatal("after the ring wrapped: want the last 8 entries")
	}
	if err := c.DeleteRange(15, 20); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := c.GetLog(16, &l); err != raft.ErrLogNotFound {
		t.Fatalf("deleted entry 16: %v", err)
	}
	if c.bytes != 0 {
		t.Fatalf("%d bytes counted after the cache was cleared", c.bytes)
	}
}
