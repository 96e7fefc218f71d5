package bodies

import (
	"container/list"
	"sync"
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
}

func (c *entryCache) init(n int, bytes int64) {
	c.maxN, c.maxBytes = n, bytes
	c.order = list.New()
	c.byIndex = map[uint64]*list.Element{}
}

func (c *entryCache) get(index uint64) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byIndex[index]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cached).data, true
}

func (c *entryCache) put(index uint64, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byIndex[index]; ok {
		return
	}
	c.byIndex[index] = c.order.PushFront(&cached{index: index, data: data})
	c.bytes += int64(len(data))
	for c.order.Len() > 1 && (c.order.Len() > c.maxN || c.bytes > c.maxBytes) {
		old := c.order.Remove(c.order.Back()).(*cached)
		delete(c.byIndex, old.index)
		c.bytes -= int64(len(old.data))
	}
}

func (c *entryCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order.Init()
	clear(c.byIndex)
	c.bytes = 0
}
