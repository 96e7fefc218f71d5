package group

// DefaultSnapshotThreshold is raft's entry threshold for a snapshot when
// the state holds few messages.
const DefaultSnapshotThreshold = 8192

// SnapshotThreshold is the entry count after which raft snapshots a state
// holding queued messages: at least base, and at least one entry per
// message the state holds.
//
// A snapshot's cost grows with the state, not with the log it replaces:
// raft's FSM.Snapshot runs on the apply goroutine, and ours encodes every
// queued message's metadata there (about 0.2 s a million), then writes
// the file (300 MB at 5,000,000 queued) beside the log's own fsyncs. At a
// fixed 8,192 entries a paced 1,000 publishes a second behind 5,000,000
// queued snapshotted every 30-60 s (raft checks once per
// SnapshotInterval), each time stopping applies for a second or more.
// With one entry per queued message the snapshot's work is amortised
// over at least as many entries as it encodes messages. Restarts stay
// bounded by SnapshotBytes, which counts bytes whatever the entries.
func SnapshotThreshold(base, queued uint64) uint64 { return max(base, queued) }
