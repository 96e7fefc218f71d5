package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Target is where a group's commands go now: this node's group commit
// (Self), or the leader ID at its gRPC address Addr.
type Target struct {
	Self     bool
	ID, Addr string
}

// SubmitterConfig is what a Submitter is built with.
type SubmitterConfig struct {
	// LeaderWait bounds the wait for a leader when the caller's context
	// has no deadline.
	LeaderWait time.Duration
	// Leader waits, until deadline, for where commands go now (the node
	// knows the leader's gRPC address through gossip).
	Leader func(ctx context.Context, deadline time.Time) (Target, error)
	// Changed is closed at the next change of leader, readiness or
	// membership.
	Changed func() <-chan struct{}
	// Batcher, Forwarder, Applied and State are the group's. A node
	// that does not run the group (it forwards to its leader) has no
	// Batcher (Leader never answers Self), no Applied (a batch returns
	// once committed: nothing applies it here) and no State (commands
	// go as they are: the leader's log judges them).
	Batcher   *Batcher
	Forwarder *Forwarder
	Applied   *AppliedIndex
	State     *State
	Closing   <-chan struct{}
	// Refused, when set, hears of each try that target refused with
	// nothing appended (err, whose LeaderHint may name the leader),
	// before the next Leader.
	Refused func(target Target, err error)
}

// Submitter is the way into a group's log for everyone: local callers,
// the leader's loops, forwarded requests arrive at its Batcher.
type Submitter struct {
	cfg SubmitterConfig
}

// NewSubmitter returns a submitter.
func NewSubmitter(c SubmitterConfig) *Submitter { return &Submitter{cfg: c} }

// SubmitBatch proposes cmds in ONE log entry and returns their results,
// in order, once the entry committed AND this node's state machine applied
// it (so the effects for local consumers happened and the caller reads
// its own write; once the group closed here, the commit alone). On a
// follower the commands are forwarded to the leader. Commands that never
// reached a leader are sent again while a leader is awaited; an error
// never hides a commit, and ErrOutcomeUnknown means the outcome is
// unknown.
func (s *Submitter) SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	s.gateFailed(cmds)
	s.gateQos(cmds)
	cmds = s.gateSeen(cmds)
	deadline, hasDeadline := ctx.Deadline()
	if !hasDeadline {
		deadline = time.Now().Add(s.cfg.LeaderWait)
	}
	for {
		if s.isClosed() {
			return nil, ErrClosed
		}
		target, res, index, err := s.route(ctx, deadline, cmds)
		if err == nil {
			if len(res) != len(cmds) {
				return nil, fmt.Errorf("cluster: %d results for %d commands", len(res), len(cmds))
			}
			if s.cfg.Applied == nil {
				return res, nil
			}
			err := s.cfg.Applied.Wait(ctx, s.cfg.Closing, index)
			if errors.Is(err, ErrClosed) {
				// The group closed here (the node left it, or is
				// closing) and applies nothing more: the commit is
				// all there is to wait for, as on a node that does
				// not run the group.
				return res, nil
			}
			if err != nil {
				return nil, fmt.Errorf("cluster: committed at %d, not yet applied here: %w", index, err)
			}
			return res, nil
		}
		if !IsRetryable(err) || ctx.Err() != nil || !time.Now().Before(deadline) {
			return nil, err
		}
		if s.cfg.Refused != nil && target != nil {
			s.cfg.Refused(*target, err)
		}
		// Nothing reached the log: wait for a leader change and try again.
		wait := s.cfg.Changed()
		t := time.NewTimer(min(50*time.Millisecond, time.Until(deadline)))
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
		case <-s.cfg.Closing:
		}
		t.Stop()
	}
}

// route sends the commands once: into the local group commit on a ready
// leader, over the forwarding stream otherwise.
// It returns the target it tried, nil when it found none.
func (s *Submitter) route(ctx context.Context, deadline time.Time, cmds []*proto.Command) (*Target, []*proto.Result, uint64, error) {
	target, err := s.cfg.Leader(ctx, deadline)
	if err != nil {
		return nil, nil, 0, err
	}
	p := NewRequest(cmds)
	if target.Self {
		s.cfg.Batcher.Enqueue(p)
		select {
		case <-p.Done():
		case <-ctx.Done():
			return &target, nil, 0, ctx.Err()
		case <-s.cfg.Closing:
			p.Finish(nil, 0, fmt.Errorf("%w: %w", ErrClosed, ErrOutcomeUnknown))
		}
		res, index, err := p.Outcome()
		return &target, res, index, err
	}
	res, index, err := s.cfg.Forwarder.Submit(ctx, target.ID, target.Addr, p)
	return &target, res, index, err
}

func (s *Submitter) isClosed() bool {
	select {
	case <-s.cfg.Closing:
		return true
	default:
		return false
	}
}

// gateFailed clears Requeue.failed (basic.reject) while the log this node
// applied is below protocol level 8: below it a reject means what a nack
// does, and a server of an earlier release would refuse the field.
func (s *Submitter) gateFailed(cmds []*proto.Command) {
	var level uint32
	for _, c := range cmds {
		if r := c.GetRequeue(); r.GetFailed() {
			if s.cfg.State == nil {
				// No state here: the leader's log judges the field.
				return
			}
			if level == 0 {
				s.cfg.State.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
			}
			if level < fsm.RetryLevel {
				r.Failed = false
			}
		}
	}
}

// gateQos clears Credit.prefetch (a basic.qos for a running consumer)
// while the log this node applied is below protocol level 25: a server of
// an earlier release would refuse the field, and below it a consumer's
// prefetch is its Consume's; the credit still counts.
func (s *Submitter) gateQos(cmds []*proto.Command) {
	var level uint32
	for _, c := range cmds {
		if cr := c.GetCredit(); cr != nil && cr.Prefetch != nil {
			if s.cfg.State == nil {
				// No state here: the leader's log judges the field.
				return
			}
			if level == 0 {
				s.cfg.State.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
			}
			if level < fsm.QosLevel {
				cr.Prefetch = nil
			}
		}
	}
}

// gateSeen leaves out what a closing channel's client saw
// (ChannelClosed.seen, ConnectionClosed.seen) while the log this node
// applied is below protocol level 22: a server of an earlier release
// would refuse the fields, and below it every delivery returned by a
// close counts as seen. The commands stay as the caller made them (a
// close goes to several logs, which may stand at different levels):
// a copy without the fields takes their place in a copy of cmds.
func (s *Submitter) gateSeen(cmds []*proto.Command) []*proto.Command {
	var level uint32
	var out []*proto.Command
	for i, c := range cmds {
		if !c.GetChannelClosed().GetSeenListed() && !c.GetConnectionClosed().GetSeenListed() {
			continue
		}
		if s.cfg.State == nil {
			// No state here: the leader's log judges the fields.
			return cmds
		}
		if level == 0 {
			s.cfg.State.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
		}
		if level >= fsm.SeenAtCloseLevel {
			return cmds
		}
		if out == nil {
			out = slices.Clone(cmds)
		}
		out[i] = fsm.WithoutSeen(c)
	}
	if out == nil {
		return cmds
	}
	return out
}
