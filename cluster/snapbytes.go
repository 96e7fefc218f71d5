package cluster

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// DefaultSnapshotBytes is Config.SnapshotBytes's default. A restart reads
// the log after the last snapshot twice, once for configuration changes
// as raft opens and once applying it, which ran at 25-35 MB/s and about
// 8 MB/s of 1 KiB publishes on a loaded 2-core machine: 128 MiB bounds
// that to about 20 s there and a few seconds on a quiet one, 64 times
// less than raft's 8,192 entries allow at 1 MiB each. A snapshot costs the
// state's metadata (32 bytes a queued message, under the state lock for
// 0.06-1.8 s at 1,000,000 queued): at 20 MB/s of publishes this takes
// one every 6-7 s, the state written once per 128 MiB of log.
const DefaultSnapshotBytes = 128 << 20

// logMeter counts the bytes of the entries appended to the log and asks
// for a snapshot once budget of them came since the last one.
type logMeter struct {
	budget   int64
	appended atomic.Int64 // every entry's data since the node started
	base     atomic.Int64 // appended when the last snapshot (or attempt) began
	due      chan struct{}
}

func newLogMeter(budget int64) *logMeter {
	return &logMeter{budget: budget, due: make(chan struct{}, 1)}
}

func (m *logMeter) add(logs []*raft.Log) {
	var n int64
	for _, l := range logs {
		n += int64(len(l.Data))
	}
	if total := m.appended.Add(n); m.budget > 0 && total-m.base.Load() >= m.budget {
		select {
		case m.due <- struct{}{}:
		default:
		}
	}
}

// pending is what was appended since the last snapshot.
func (m *logMeter) pending() int64 { return m.appended.Load() - m.base.Load() }

// reset starts a new count: a snapshot is being taken.
func (m *logMeter) reset() {
	if m != nil {
		m.base.Store(m.appended.Load())
	}
}

// meteredLogs is the log store raft writes to, counting what it appends:
// the leader's own entries and a follower's replicated ones alike.
type meteredLogs struct {
	*logCache
	meter *logMeter
}

func (l meteredLogs) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

func (l meteredLogs) StoreLogs(logs []*raft.Log) error {
	if err := l.logCache.StoreLogs(logs); err != nil {
		return err
	}
	l.meter.add(logs)
	return nil
}

// snapshotBytesLoop snapshots when the meter says the log grew by its
// budget. Each attempt starts a new count whatever its outcome, and any
// snapshot raft takes itself (by entry count, or the body reclaimer's)
// does too, so there is at most one attempt per budget of appended bytes:
// a snapshot that cannot compact the log (its bodies pinned, or the
// trailing entries kept) is still taken only once per budget, and still
// bounds a restart, which reads only the entries after it.
func (n *Node) snapshotBytesLoop() {
	defer n.wg.Done()
	m := n.logBytes
	for {
		select {
		case <-m.due:
		case <-n.closing:
			return
		}
		if m.pending() < m.budget || n.Err() != nil {
			continue
		}
		pending := m.pending()
		m.reset()
		err := n.await(context.Background(), n.raft.Snapshot())
		switch {
		case err == nil:
			n.log.Info("snapshot by log size", "appended_bytes", pending)
		case errors.Is(err, raft.ErrNothingNewToSnapshot):
		default:
			n.log.Warn("snapshot by log size", "appended_bytes", pending, "err", err)
		}
	}
}
