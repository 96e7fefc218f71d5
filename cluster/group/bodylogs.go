package group

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// bodyLogs is the log the body store reads entries from: through the log
// cache once the node has made it (the cache wraps a store that asks the
// body store what to keep, so it comes after the body store opens). A
// consumer that is handed messages as its acks return credit gets them
// from entries applied a moment before; reading each such entry back from
// the segment file and decoding it was a tenth of the consumer's node's
// CPU with four publishers, and the cache still holds it.
type bodyLogs struct {
	raft.LogStore
	cache atomic.Pointer[logCache]
}

func (b *bodyLogs) GetLog(index uint64, l *raft.Log) error {
	if c := b.cache.Load(); c != nil {
		return c.GetLog(index, l)
	}
	return b.LogStore.GetLog(index, l)
}
