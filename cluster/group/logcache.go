package group

import (
	"sync"

	"github.com/hashicorp/raft"
)

// logCache keeps the newest entries raft appended in memory, as
// raft.LogCache does (the leader reads them back to replicate them), but
// within a byte budget: raft.LogCache holds its last 512 entries whatever
// their size, so a burst of large publishes kept gigabytes reachable
// long after they were committed. An entry over inlineMax is not cached
// at all; its side file is read when it is needed.
type logCache struct {
	raft.LogStore
	budget int64

	mu    sync.RWMutex
	slots []*raft.Log
	bytes int64
	first uint64 // no entry below it is cached
}

// logCacheBytes is the log cache's budget. What it serves is the newest
// entries: the leader replicating to a follower a few entries behind, and
// the body store delivering what was applied a moment before; at 20,000
// 1 KiB publishes a second, batched about 130 to an entry, 16 MiB is the
// last 0.75 s. It is resident memory whatever the backlog, so it counts
// against a node's memory per queued message: 64 MiB was 130 bytes a
// message at 500,000 queued. A follower further behind reads from disk.
const logCacheBytes = 16 << 20

func newLogCache(capacity int, budget int64, store raft.LogStore) *logCache {
	return &logCache{LogStore: store, budget: budget, slots: make([]*raft.Log, capacity)}
}

func (c *logCache) slot(index uint64) **raft.Log {
	return &c.slots[index%uint64(len(c.slots))]
}

func (c *logCache) GetLog(index uint64, l *raft.Log) error {
	c.mu.RLock()
	cached := *c.slot(index)
	c.mu.RUnlock()
	if cached != nil && cached.Index == index {
		*l = *cached
		return nil
	}
	return c.LogStore.GetLog(index, l)
}

func (c *logCache) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		s := c.slot(l.Index)
		if old := *s; old != nil {
			c.bytes -= int64(len(old.Data))
		}
		*s = nil
		if len(l.Data) > inlineMax {
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
	return nil
}

func (c *logCache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	clear(c.slots)
	c.bytes, c.first = 0, 0
	c.mu.Unlock()
	return c.LogStore.DeleteRange(min, max)
}

// IsMonotonic passes on raft.MonotonicLogStore.
func (c *logCache) IsMonotonic() bool {
	m, ok := c.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
