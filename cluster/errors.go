package cluster

import "github.com/raftmq/raftmq/cluster/group"

// Errors returned by a Node (the group's, package group). Callers test
// them with errors.Is; other packages alias them rather than defining
// their own.
var (
	// ErrNotLeader means the operation must run on the leader and this node
	// is not it.
	ErrNotLeader = group.ErrNotLeader
	// ErrNoLeader means no leader could be found before the deadline (an
	// election is under way, or this node is cut off from a majority).
	ErrNoLeader = group.ErrNoLeader
	// ErrClosed means the node is shutting down or shut down.
	ErrClosed = group.ErrClosed
	// ErrOutcomeUnknown means the commands reached a leader that lost its
	// leadership (or its connection) before they were known to commit: they
	// may or may not have committed. It is never returned for commands that
	// are known to have committed or known not to have been appended.
	ErrOutcomeUnknown = group.ErrOutcomeUnknown
)
