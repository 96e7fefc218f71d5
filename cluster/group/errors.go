package group

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

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

// errNotAppended marks a failure where nothing reached the log, so the
// commands may be sent again safely.
type errNotAppended struct{ err error }

func (e errNotAppended) Error() string { return e.err.Error() }
func (e errNotAppended) Unwrap() error { return e.err }

// NotAppended marks err as a failure where nothing reached the log.
func NotAppended(err error) error { return errNotAppended{err} }

// NotAppendedf is NotAppended of err with a message after it.
func NotAppendedf(err error, format string, args ...any) error {
	return errNotAppended{fmt.Errorf("%w: "+format, append([]any{err}, args...)...)}
}

// notLeader is a refusal for want of leadership from a node that names
// the leader it knows of (leader; "" when it knows none).
type notLeader struct {
	err    error
	leader string
}

func (e notLeader) Error() string { return e.err.Error() }
func (e notLeader) Unwrap() error { return e.err }

// NotLeaderf is NotAppendedf of ErrNotLeader from a node that names
// leader as the group's leader (LeaderHint), "" when it knows none.
func NotLeaderf(leader, format string, args ...any) error {
	return errNotAppended{notLeader{fmt.Errorf("%w: "+format, append([]any{ErrNotLeader}, args...)...), leader}}
}

// LeaderHint is the leader a refusal for want of leadership names
// (NotLeaderf), "" when err names none.
func LeaderHint(err error) string {
	var e notLeader
	if errors.As(err, &e) {
		return e.leader
	}
	return ""
}

// IsRetryable reports whether nothing of err's commands reached the log.
func IsRetryable(err error) bool {
	var e errNotAppended
	return errors.As(err, &e)
}

// MapRaftError turns raft's errors into the group's: failures where
// nothing was appended become retryable, lost leadership after the append
// becomes ErrOutcomeUnknown.
func MapRaftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return NotAppendedf(ErrNotLeader, "%v", err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrClosed, ErrOutcomeUnknown)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return NotAppendedf(ErrNoLeader, "%v", err)
	}
	return err
}
