package group

import (
	"sync"

	"github.com/hashicorp/raft"
)

// logCache keeps the newest entries raft appended in memory, as
// raft.LogCache does (the leader reads them back to replicate them), but
// within a byte budget: raft.LogCache holds its last 512 entries whatever
// their size, so a burst of large publishes kept gigabytes reachable
// long after they were committed. An entry over inlineMax is cached only
// while it is the newest entry (newest); otherwise its side file is read
// when it is needed.
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
	gen    uint64 // moves with every append and truncation
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
	newest, gen := c.newest, c.gen
	c.mu.RUnlock()
	if cached != nil && cached.Index == index {
		*l = *cached
		return nil
	}
	if newest != nil && newest.Index == index {
		*l = *newest
		return nil
	}
	if err := c.LogStore.GetLog(index, l); err != nil {
		return err
	}
	if len(l.Data) > inlineMax {
		// A restarted leader's last entry was never appended here.
		// What was read is kept only if the log did not change meanwhile:
		// a truncation may have replaced the entry at index.
		if last, err := c.LogStore.LastIndex(); err == nil && last == index {
			read := *l
			c.mu.Lock()
			if c.gen == gen {
				c.newest = &read
			}
			c.mu.Unlock()
		}
	}
	return nil
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
	return nil
}

func (c *logCache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	clear(c.slots)
	c.bytes, c.first, c.newest = 0, 0, nil
	c.gen++
	c.mu.Unlock()
	err := c.LogStore.DeleteRange(min, max)
	// A read between the two locks found the entries still in the store.
	c.mu.Lock()
	c.newest = nil
	c.gen++
	c.mu.Unlock()
	return err
}

// IsMonotonic passes on raft.MonotonicLogStore.
func (c *logCache) IsMonotonic() bool {
	m, ok := c.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
