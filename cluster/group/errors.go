package group

import "errors"

// Errors of a group, which the node returns as its own (cluster aliases
// them). Callers test them with errors.Is.
var (
	// ErrNotLeader means the operation must run on the leader and this node
	// is not it.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrNoLeader means no leader could be found before the deadline (an
	// election is under way, or this node is cut off from a majority).
	ErrNoLeader = errors.New("cluster: no leader")
	// ErrClosed means the node is shutting down or shut down.
	ErrClosed = errors.New("cluster: node closed")
	// ErrOutcomeUnknown means the commands reached a leader that lost its
	// leadership (or its connection) before they were known to commit: they
	// may or may not have committed. It is never returned for commands that
	// are known to have committed or known not to have been appended.
	ErrOutcomeUnknown = errors.New("cluster: leadership lost, outcome unknown")
)
