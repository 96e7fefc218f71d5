package group

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// logCache keeps the newest entries raft appended in memory, as
// raft.LogCache does (the leader reads them back to replicate them), but
// within a byte budget: raft.LogCache holds its last 512 entries whatever
// their size, so a burst of large publishes kept gigabytes reachable
// long after they were committed. An entry over inlineMax is cached only
// while it is the newest entry (newest), or while it is read again and
// again (recent); otherwise it is read from the store when it is needed.
type logCache struct {
	raft.LogStore
	budget int64

	mu    sync.RWMutex
	slots []*raft.Log
	bytes int64
	first uint64 // no entry below it is cached
	// newest is the newest entry over inlineMax appended or read, kept
	// while no later entry is appended: a leader reads the term of its
	// last entry for every follower on every commit timeout (raft's
	// setPreviousLog), so a large publish left last in the log was read
	// back from its side file hundreds of times a second, a gigabyte a
	// second of garbage whose collection starved raft's heartbeats.
	newest *raft.Log
	// recent are entries over inlineMax read from the store lately,
	// kept until none read them for recentFor. A follower behind by a
	// large entry had it read for every append raft sent it (the entry
	// itself, or its term as the previous one), and the follower read its
	// own copy for every append that overlapped it; with a bolt log each
	// read copied tens of MiB in one uninterruptible move, and the
	// collector's stop-the-world waited for each (pauses of 100-300 ms, a
	// process silent for seconds, leaders lost). At most recentMax, so a
	// follower replaying many large entries reads each from the store.
	recent [recentMax]readEntry
	timer  *time.Timer // drops what went unread for recentFor
	now    func() time.Time
	gen    uint64 // moves with every append and truncation
	// rewrites moves when entries may be replaced: a truncation, or an
	// append at or below last, the highest index appended. An append
	// above it changes no entry a read may have raced with.
	rewrites, last uint64
	// quiet lets the cache go once the log has stood still for
	// quietFor (letGo); quietGen is gen when it was armed.
	quiet    *time.Timer
	quietFor time.Duration
	quietGen uint64
	// giveBack is told that the log went quiet and how many bytes the
	// cache let go of.
	giveBack func(freed int64)
}

// readEntry is an entry of logCache.recent and when it was last read.
type readEntry struct {
	l  *raft.Log
	at time.Time
}

const (
	recentMax = 2
	recentFor = time.Second
)

// logCacheBytes is the log cache's budget. What it serves is the newest
// entries: the leader replicating to a follower a few entries behind, and
// the body store delivering what was applied a moment before; at 20,000
// 1 KiB publishes a second, batched about 130 to an entry, 16 MiB is the
// last 0.75 s. It is resident memory whatever the backlog, so it counts
// against a node's memory per queued message: 64 MiB was 130 bytes a
// message at 500,000 queued. A follower further behind reads from disk.
const logCacheBytes = 16 << 20

// quietFor is how long a log takes no append before its cache lets go of
// all but its last entry. Once a burst ends every live follower has the
// entries (a follower behind reads them from the store anyway) and the
// body store has read what it delivers at once; what a backlog's
// consumer reads later is long out of a 16 MiB window. Kept, the window
// is resident memory a quiet node holds for nothing, twice over once the
// collector's headroom is counted: 60 bytes a message at 500,000 queued.
const quietFor = 2 * time.Second

func newLogCache(capacity int, budget int64, store raft.LogStore) *logCache {
	return &logCache{LogStore: store, budget: budget, slots: make([]*raft.Log, capacity), now: time.Now,
		quietFor: quietFor}
}

func (c *logCache) slot(index uint64) **raft.Log {
	return &c.slots[index%uint64(len(c.slots))]
}

func (c *logCache) GetLog(index uint64, l *raft.Log) error {
	c.mu.RLock()
	cached := *c.slot(index)
	newest, gen, rewrites := c.newest, c.gen, c.rewrites
	c.mu.RUnlock()
	if cached != nil && cached.Index == index {
		*l = *cached
		return nil
	}
	if newest != nil && newest.Index == index {
		*l = *newest
		return nil
	}
	if c.readRecent(index, l) {
		return nil
	}
	if err := c.LogStore.GetLog(index, l); err != nil {
		return err
	}
	if len(l.Data) > inlineMax {
		read := *l
		// A restarted leader's last entry was never appended here: it
		// is the newest. What was read is kept only if the log did not
		// change meanwhile: a truncation may have replaced the entry at
		// index.
		last, err := c.LogStore.LastIndex()
		c.mu.Lock()
		switch {
		case c.gen == gen && err == nil && last == index:
			c.newest = &read
		case c.rewrites == rewrites:
			// Appends meanwhile are usual (a follower behind while the
			// leader goes on), and change no entry up to their first.
			c.keepRecent(&read)
		}
		c.mu.Unlock()
	}
	return nil
}

// readRecent serves index from recent, if it is there.
func (c *logCache) readRecent(index uint64, l *raft.Log) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.recent {
		if r := &c.recent[i]; r.l != nil && r.l.Index == index {
			r.at = c.now()
			*l = *r.l
			return true
		}
	}
	return false
}

// keepRecent keeps l in recent in place of the entry read least lately,
// and has it dropped once unread for recentFor. Under c.mu.
func (c *logCache) keepRecent(l *raft.Log) {
	oldest := 0
	for i := range c.recent {
		if c.recent[i].l == nil || c.recent[i].at.Before(c.recent[oldest].at) {
			oldest = i
		}
		if c.recent[i].l == nil {
			break
		}
	}
	c.recent[oldest] = readEntry{l: l, at: c.now()}
	if c.timer == nil {
		c.timer = time.AfterFunc(recentFor, c.dropUnread)
	}
}

// dropUnread drops the recent entries unread for recentFor, and comes
// back while any is left.
func (c *logCache) dropUnread() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer = nil
	now, next := c.now(), time.Duration(0)
	for i := range c.recent {
		r := &c.recent[i]
		if r.l == nil {
			continue
		}
		if left := recentFor - now.Sub(r.at); left > 0 {
			next = max(next, left)
			continue
		}
		*r = readEntry{}
	}
	if next > 0 {
		c.timer = time.AfterFunc(next, c.dropUnread)
	}
}

func (c *logCache) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.newest = nil
	if len(logs) > 0 {
		if logs[0].Index <= c.last {
			c.rewrites++
			c.recent = [recentMax]readEntry{}
		}
		c.last = max(c.last, logs[len(logs)-1].Index)
	}
	for _, l := range logs {
		s := c.slot(l.Index)
		if old := *s; old != nil {
			c.bytes -= int64(len(old.Data))
		}
		*s = nil
		if len(l.Data) > inlineMax {
			if l == logs[len(logs)-1] {
				c.newest = l
			}
			continue
		}
		*s = l
		c.bytes += int64(len(l.Data))
		if n := uint64(len(c.slots)); l.Index >= n {
			c.first = max(c.first, l.Index+1-n) // older slots are reused
		}
		for ; c.bytes > c.budget && c.first < l.Index; c.first++ {
			if old := *c.slot(c.first); old != nil && old.Index == c.first {
				c.bytes -= int64(len(old.Data))
				*c.slot(c.first) = nil
			}
		}
	}
	if c.quiet == nil && c.bytes > 0 {
		// One timer a quietFor while appends go on, none while quiet.
		c.quietGen = c.gen
		c.quiet = time.AfterFunc(c.quietFor, c.letGo)
	}
	return nil
}

// letGo runs quietFor after the cache was armed: if nothing was appended
// since, it drops every entry but the last (a leader reads its term for
// each append it sends) and tells giveBack what it freed, nothing
// included; otherwise it looks again quietFor later.
func (c *logCache) letGo() {
	c.mu.Lock()
	if c.quiet == nil {
		c.mu.Unlock()
		return // stopped
	}
	if c.gen != c.quietGen {
		c.quietGen = c.gen
		c.quiet = time.AfterFunc(c.quietFor, c.letGo)
		c.mu.Unlock()
		return
	}
	c.quiet = nil
	before := c.bytes
	var last *raft.Log
	if l := *c.slot(c.last); l != nil && l.Index == c.last {
		last = l
	}
	clear(c.slots)
	c.bytes = 0
	if last != nil {
		*c.slot(last.Index) = last
		c.bytes = int64(len(last.Data))
	}
	freed, giveBack := before-c.bytes, c.giveBack
	c.mu.Unlock()
	if giveBack != nil {
		giveBack(freed)
	}
}

// stop drops the pending look at a quiet log: the log is closing.
func (c *logCache) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quiet != nil {
		c.quiet.Stop()
		c.quiet = nil
	}
}

func (c *logCache) DeleteRange(min, max uint64) error {
	// Compaction deletes a prefix, and no entry after it changes; a
	// follower's conflicting suffix is deleted to be written again.
	c.mu.Lock()
	suffix := c.last == 0 || max >= c.last
	clear(c.slots)
	c.bytes, c.first, c.newest = 0, 0, nil
	c.dropRecent(min, max, suffix)
	c.gen++
	c.mu.Unlock()
	err := c.LogStore.DeleteRange(min, max)
	// A read between the two locks found the entries still in the store.
	c.mu.Lock()
	c.newest = nil
	c.dropRecent(min, max, suffix)
	c.gen++
	c.mu.Unlock()
	return err
}

// dropRecent drops the recent entries from min to max; for a suffix, all
// of them, and reads under way are not kept. Under c.mu.
func (c *logCache) dropRecent(min, max uint64, suffix bool) {
	if suffix {
		c.recent = [recentMax]readEntry{}
		c.rewrites++
		c.last = min - 1
		if min == 0 {
			c.last = 0
		}
		return
	}
	for i := range c.recent {
		if l := c.recent[i].l; l != nil && l.Index >= min && l.Index <= max {
			c.recent[i] = readEntry{}
		}
	}
}

// IsMonotonic passes on raft.MonotonicLogStore.
func (c *logCache) IsMonotonic() bool {
	m, ok := c.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
