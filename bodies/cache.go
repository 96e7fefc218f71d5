package bodies

import (
	"container/list"
	"sync"
	"sync/atomic"
)

// entryCache keeps the data of the last log entries read, so that the
// Gets of the bodies of one batch entry read it once (each Get then scans
// the entry up to its command). Least recently
// used first out, within a count and a byte budget; the newest entry
// stays whatever its size. It has its own lock: a Get from the log never
// waits for the store's.
type entryCache struct {
	mu       sync.Mutex
	maxN     int
	maxBytes int64
	bytes    int64
	order    *list.List // of *cached, most recent first
	byIndex  map[uint64]*list.Element
}

type cached struct {
	index uint64
	data  []byte
	// reads and scan serve the second and later reads of an entry
	// (cached.body).
	reads atomic.Int32
	scan  atomic.Pointer[entryBodies]
}

// body is the body of the command at pos of the entry. A consumer behind
// a backlog takes an entry's bodies one after the other (a batch of a
// hundred publishes or more), and each read scanned the commands before
// its own: 9 % of a consumer's node's CPU with four publishers. So the
// second read of an entry the cache keeps scans all its commands once,
// and the reads after it find their body at once; a first read (a
// delayed release, out of the log's order) scans only up to its own.
func (c *cached) body(pos uint32) ([]byte, error) {
	e := c.scan.Load()
	if e == nil && c.reads.Add(1) > 1 {
		var err error
		if e, err = scanEntry(c.data); err == nil {
			c.scan.Store(e)
		}
	}
	if e != nil {
		if b, err := e.body(pos); err == nil {
			return b, nil
		}
	}
	return entryBody(c.data, pos)
}

func (c *entryCache) init(n int, bytes int64) {
	c.maxN, c.maxBytes = n, bytes
	c.order = list.New()
	c.byIndex = map[uint64]*list.Element{}
}

func (c *entryCache) get(index uint64) (*cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byIndex[index]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cached), true
}

// put caches data as the entry at index and returns the entry cached
// (the one there already, if any).
func (c *entryCache) put(index uint64, data []byte) *cached {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byIndex[index]; ok {
		return el.Value.(*cached)
	}
	e := &cached{index: index, data: data}
	c.byIndex[index] = c.order.PushFront(e)
	c.bytes += int64(len(data))
	for c.order.Len() > 1 && (c.order.Len() > c.maxN || c.bytes > c.maxBytes) {
		old := c.order.Remove(c.order.Back()).(*cached)
		delete(c.byIndex, old.index)
		c.bytes -= int64(len(old.data))
	}
	return e
}

func (c *entryCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order.Init()
	clear(c.byIndex)
	c.bytes = 0
}
