package group

import "github.com/hashicorp/raft"

// holdingLogs is a group's log store with compaction held back: a
// DeleteRange of a log prefix stops below the body store's pin. A delete
// of the whole log passes: raft does that only after installing a
// snapshot from the leader, whose bodies the restore stored first.
type holdingLogs struct {
	logStore
	pin func() uint64
}

func (h holdingLogs) DeleteRange(min, max uint64) error {
	if last, err := h.logStore.LastIndex(); err == nil && max >= last {
		return h.logStore.DeleteRange(min, max)
	}
	if p := h.pin(); max >= p {
		if p == 0 || p <= min {
			return nil
		}
		max = p - 1
	}
	return h.logStore.DeleteRange(min, max)
}

// IsMonotonic passes on raft.MonotonicLogStore: raft clears a monotonic
// log after installing a snapshot instead of leaving a gap.
func (h holdingLogs) IsMonotonic() bool {
	m, ok := h.logStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
