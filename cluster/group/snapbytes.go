package group

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// DefaultSnapshotBytes is StorageOptions.SnapshotBytes's default. A restart reads
// the log after the last snapshot twice, once for configuration changes
// as raft opens and once applying it, which ran at 25-35 MB/s and about
// 8 MB/s of 1 KiB publishes on a loaded 2-core machine: 128 MiB bounds
// that to about 20 s there and a few seconds on a quiet one, 64 times
// less than raft's 8,192 entries allow at 1 MiB each. A snapshot costs the
// state's metadata (32 bytes a queued message, under the state lock for
// 0.06-1.8 s at 1,000,000 queued): at 20 MB/s of publishes this takes
// one every 6-7 s, the state written once per 128 MiB of log.
const DefaultSnapshotBytes = 128 << 20

// LogMeter counts the bytes of the entries appended to the log and asks
// for a snapshot once budget of them came since the last one.
type LogMeter struct {
	budget   int64
	appended atomic.Int64 // every entry's data appended since the node started, and replayed (Replayed)
	base     atomic.Int64 // appended when the last snapshot (or attempt) began
	due      chan struct{}
	appends  func() // hears of every append (OnAppend)
}

// OnAppend has f called after every append to the log; before raft
// starts.
func (m *LogMeter) OnAppend(f func()) { m.appends = f }

func newLogMeter(budget int64) *LogMeter {
	return &LogMeter{budget: budget, due: make(chan struct{}, 1)}
}

func (m *LogMeter) add(logs []*raft.Log) {
	var n int64
	for _, l := range logs {
		n += int64(len(l.Data))
	}
	m.count(n)
}

// Replayed counts n bytes of entries this process applied from the log
// it started with. The log after the last snapshot is what a restart
// reads, whoever appended it: a node killed every few seconds never
// appends a budget in one life, so counting only its own appends, it
// would never snapshot by size and each restart would replay the whole
// log since its last snapshot, longer each time.
func (m *LogMeter) Replayed(n int64) {
	if m != nil && n > 0 {
		m.count(n)
	}
}

func (m *LogMeter) count(n int64) {
	if total := m.appended.Add(n); m.budget > 0 && total-m.base.Load() >= m.budget {
		select {
		case m.due <- struct{}{}:
		default:
		}
	}
}

// Budget is the bytes appended after which a snapshot is due (0 or
// less: never by size).
func (m *LogMeter) Budget() int64 { return m.budget }

// Due receives when the appended bytes may have reached the budget.
func (m *LogMeter) Due() <-chan struct{} { return m.due }

// Pending is what was appended since the last snapshot.
func (m *LogMeter) Pending() int64 { return m.appended.Load() - m.base.Load() }

// Reset starts a new count: a snapshot is being taken.
func (m *LogMeter) Reset() {
	if m != nil {
		m.base.Store(m.appended.Load())
	}
}

// meteredLogs is the log store raft writes to, counting what it appends:
// the leader's own entries and a follower's replicated ones alike.
type meteredLogs struct {
	*logCache
	meter *LogMeter
}

func (l meteredLogs) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

func (l meteredLogs) StoreLogs(logs []*raft.Log) error {
	if err := l.logCache.StoreLogs(logs); err != nil {
		return err
	}
	l.meter.add(logs)
	if f := l.meter.appends; f != nil {
		f()
	}
	return nil
}
