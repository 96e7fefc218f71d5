package group

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// countingStore counts the reads that reach the store; during, when
// set, runs in the middle of each.
type countingStore struct {
	*raft.InmemStore
	reads  int
	during func()
}

func (s *countingStore) GetLog(index uint64, l *raft.Log) error {
	s.reads++
	if s.during != nil {
		s.during()
	}
	return s.InmemStore.GetLog(index, l)
}

// cacheOps appends an entry of n bytes to c (put), and reads one,
// reporting whether the cache served it without reading store (cached).
func cacheOps(t *testing.T, c *logCache, store *countingStore) (put func(index uint64, n int), cached func(index uint64) bool) {
	put = func(index uint64, n int) {
		t.Helper()
		if err := c.StoreLogs([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: make([]byte, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	cached = func(index uint64) bool {
		t.Helper()
		before := store.reads
		var l raft.Log
		if err := c.GetLog(index, &l); err != nil || l.Index != index {
			t.Fatalf("entry %d: %v", index, err)
		}
		return store.reads == before
	}
	return put, cached
}

// The cache serves recent entries within its byte budget, the newest
// first, and never holds an entry kept out of line.
func TestLogCache_KeepsRecentEntriesWithinItsBudget(t *testing.T) {
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newLogCache(8, 3<<10, store)
	put, cached := cacheOps(t, c, store)
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
	// Read back from the store above, it is kept a while (recent).
	if !cached(5) {
		t.Fatal("an older entry over inlineMax, read once, is read from the store again")
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

// A large entry that is no longer the newest, read from the store (a
// follower behind by it is sent it, or its term, on every append), is
// kept while something reads it within recentFor, two such entries at
// most; a truncation of the tail drops it, a compaction below it does
// not, and a read that raced an append rewriting entries is not kept.
func TestLogCache_KeepsALargeEntryReadLatelyWhileItIsRead(t *testing.T) {
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newLogCache(8, 1<<20, store)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	put, cached := cacheOps(t, c, store)
	put(1, 10)
	for i := uint64(2); i <= 4; i++ {
		put(i, inlineMax+1)
	}
	put(5, 10)
	if cached(2) || !cached(2) {
		t.Fatal("a large entry read once is read from the store again")
	}
	// Read within recentFor, it stays; unread for recentFor, it goes.
	now = now.Add(recentFor / 2)
	c.dropUnread()
	if !cached(2) {
		t.Fatal("a large entry read half a recentFor ago was dropped")
	}
	now = now.Add(recentFor)
	c.dropUnread()
	if cached(2) {
		t.Fatal("a large entry unread for recentFor is still kept")
	}
	// Two at most: a third read drops the one read least lately.
	now = now.Add(time.Millisecond)
	cached(3)
	now = now.Add(time.Millisecond)
	cached(4)
	if !cached(3) || !cached(4) {
		t.Fatal("the two entries read last are not kept")
	}
	now = now.Add(time.Millisecond)
	cached(4)
	now = now.Add(time.Millisecond)
	if cached(2) || !cached(4) || cached(3) {
		t.Fatal("a third entry read did not take the place of the one read least lately")
	}
	if err := c.DeleteRange(1, 1); err != nil { // compaction below them
		t.Fatal(err)
	}
	if !cached(3) {
		t.Fatal("a compaction below a kept entry dropped it")
	}
	if err := c.DeleteRange(3, 5); err != nil { // a conflicting tail
		t.Fatal(err)
	}
	var l raft.Log
	if err := c.GetLog(3, &l); err != raft.ErrLogNotFound {
		t.Fatalf("entry 3, truncated, read as %v", err)
	}
	// A read that an append at or below the log's last races is not kept:
	// the entry read may be the one replaced.
	put(3, inlineMax+1)
	put(4, 10)
	store.during = func() { store.during = nil; put(4, 10) }
	if cached(3) || cached(3) {
		t.Fatal("a read that raced a rewrite was kept")
	}
	if !cached(3) {
		t.Fatal("a read after the rewrite was not kept")
	}
}

// A log that takes no append for quietFor has its cache let go of all
// but its last entry, and the bytes it freed reported; one still
// appended to keeps its cache and looks again later.
func TestLogCache_LetsGoOfItsEntriesWhenTheLogIsQuiet(t *testing.T) {
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newLogCache(8, 1<<20, store)
	c.quietFor = time.Hour // letGo is called by hand below
	defer c.stop()
	var freed []int64
	c.giveBack = func(n int64) { freed = append(freed, n) }
	put, cached := cacheOps(t, c, store)
	put(1, 100)
	if c.quiet == nil {
		t.Fatal("an append left no look at the log's quiet pending")
	}
	put(2, 200)
	put(3, 300)
	c.letGo() // appends came since it was armed
	if !cached(1) || !cached(3) || len(freed) != 0 || c.quiet == nil {
		t.Fatalf("a cache appended to meanwhile let go (freed %v, pending %v)", freed, c.quiet != nil)
	}
	c.letGo() // nothing appended since the look before
	if cached(1) || cached(2) || !cached(3) {
		t.Fatal("a quiet cache kept entries before its last, or dropped its last")
	}
	if len(freed) != 1 || freed[0] != 300 || c.bytes != 300 || c.quiet != nil {
		t.Fatalf("freed %v, %d bytes counted, pending %v; want [300], 300, none", freed, c.bytes, c.quiet != nil)
	}
	put(4, 400)
	if c.quiet == nil || !cached(4) || !cached(3) {
		t.Fatal("the cache did not fill and arm again after it let go")
	}
	c.stop()
	c.letGo() // a look that fired as the log closed
	if !cached(3) {
		t.Fatal("a stopped cache let go")
	}
}

// The look at a quiet log runs by itself quietFor after the appends end.
func TestLogCache_LetsGoOnItsOwnTimer(t *testing.T) {
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newLogCache(8, 1<<20, store)
	c.quietFor = 5 * time.Millisecond
	defer c.stop()
	freed := make(chan int64, 1)
	c.giveBack = func(n int64) { freed <- n }
	put, _ := cacheOps(t, c, store)
	put(1, 100)
	put(2, 10)
	select {
	case n := <-freed:
		if n != 100 {
			t.Fatalf("freed %d bytes, want 100", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a quiet log's cache was not let go of")
	}
}

// Memory is handed back when a quiet log's cache and the heap free
// enough between them, and not more often than every.
func TestMemoryReturn_CollectsWhenAQuietLogFreesEnough(t *testing.T) {
	now := time.Unix(1000, 0)
	var reclaimable int64
	frees := 0
	m := &memoryReturn{least: 8 << 20, every: 10 * time.Second, now: func() time.Time { return now },
		reclaimable: func() int64 { return reclaimable }, free: func() { frees++ }}
	reclaimable = 1 << 20
	m.quiet(1 << 20)
	if frees != 0 {
		t.Fatal("2 MiB to free: collected")
	}
	m.quiet(7 << 20)
	if frees != 1 {
		t.Fatalf("8 MiB to free, 7 of them the cache's: %d collections, want 1", frees)
	}
	now = now.Add(time.Second)
	m.quiet(64 << 20)
	if frees != 1 {
		t.Fatal("collected again within every")
	}
	now = now.Add(10 * time.Second)
	reclaimable = 200 << 20 // a replay's garbage, the cache holding little
	m.quiet(0)
	if frees != 2 {
		t.Fatal("a quiet node's uncollected heap was not handed back")
	}
}

// What the runtime reports as reclaimable grows with garbage made since
// the last collection, and a collection takes it away.
func TestHeapReclaimable_CountsGarbageSinceTheLastCollection(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no collection but the test's
	debug.FreeOSMemory()
	before := heapReclaimable()
	var keep [][]byte
	for range 64 {
		keep = append(keep, make([]byte, 1<<20))
	}
	keep = nil
	if got := heapReclaimable(); got < before+60<<20 {
		t.Fatalf("64 MiB of garbage made: reclaimable %d, %d before", got, before)
	}
	debug.FreeOSMemory()
	if got := heapReclaimable(); got > before+4<<20 {
		t.Fatalf("after a collection that returned the heap: reclaimable %d, %d before", got, before)
	}
	runtime.KeepAlive(keep)
}
