package cluster

import (
	"context"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// dueDuties are the leader's duties that fall due on the log clock, each
// a loop of the term: the deaths of messages (expiryLoop), the leases of
// queues (leaseLoop), the consumer timeouts (consumerTimeoutLoop) and the
// delayed releases (delayedLoop). The first three share dueLoop; the
// releases judge their progress by the head message instead. Node-down
// is the reconcile's (leader.go).
func (n *Node) dueDuties() []func(context.Context) {
	return []func(context.Context){n.expiryLoop, n.leaseLoop, n.consumerTimeoutLoop, n.delayedLoop}
}

// dueLoop is the shape of the expiry and lease schedulers: sleep on the
// Clock until next() falls due, then propose(now), where now is the least
// stamp the entry can get; wake early after every apply (a new, earlier
// deadline may have appeared). If a proposal leaves the same deadline due
// (the state machine disagreed), back off before proposing again.
func (n *Node) dueLoop(ctx context.Context, what string,
	next func(m *fsm.Machine) (int64, bool), propose func(ctx context.Context, now int64) (bool, error)) {
	lastProposed := int64(-1 << 63)
	backoff := time.Duration(0)
	retry := false // the backoff ran out: propose even if it looks stuck
	for {
		_, applied := n.group.Applied().Load()
		var at int64
		var ok bool
		n.View(func(m *fsm.Machine) { at, ok = next(m) })
		var timer Timer
		if ok {
			now := n.stamp.peek()
			switch {
			case at <= now && at <= lastProposed && !retry:
				backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
				n.log.Debug("due work still due after its proposal", "what", what, "deadline", at, "backoff", backoff)
				t := n.cfg.Clock.NewTimer(backoff)
				select {
				case <-t.C():
				case <-ctx.Done():
					t.Stop()
					return
				}
				retry = true
				continue
			case at <= now:
				retry = false
				proposed, err := propose(ctx, now)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					n.log.Warn("proposal failed", "what", what, "err", err)
					if !sleepCtx(ctx, 100*time.Millisecond) {
						return
					}
					continue
				}
				if proposed {
					if at > lastProposed {
						backoff = 0
					}
					lastProposed = now
					continue
				}
				timer = n.cfg.Clock.NewTimer(50 * time.Millisecond)
			default:
				timer = n.cfg.Clock.NewTimer(time.Duration(at-now) * time.Millisecond)
			}
		}
		if !awaitDue(ctx, timer, applied) {
			return
		}
	}
}

// awaitDue waits for a scheduler's timer (nil: none), the next apply
// (applied, nil to ignore applies), or the end of ctx, and reports whether
// the scheduler goes on.
func awaitDue(ctx context.Context, timer Timer, applied <-chan struct{}) bool {
	var fire <-chan time.Time
	if timer != nil {
		fire = timer.C()
		defer timer.Stop()
	}
	select {
	case <-fire:
	case <-applied:
	case <-ctx.Done():
	}
	return ctx.Err() == nil
}

// expiryLoop proposes ONE Expire naming every queue with a message due.
func (n *Node) expiryLoop(ctx context.Context) {
	n.dueLoop(ctx, "expire", (*fsm.Machine).NextDeadline, func(ctx context.Context, now int64) (bool, error) {
		var due []*proto.QueueRef
		n.View(func(m *fsm.Machine) { due = m.DueExpiries(now) })
		if len(due) == 0 {
			return false, nil
		}
		res, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Expire{Expire: &proto.Expire{Queues: due}}})
		if err == nil && res.GetCode() != 0 {
			n.log.Warn("expire refused", "code", res.GetCode(), "text", res.GetText())
		}
		return err == nil, err
	})
}

// leaseLoop proposes ExpireQueue for each queue whose x-expires lease is
// due, in one entry.
func (n *Node) leaseLoop(ctx context.Context) {
	n.dueLoop(ctx, "expire-queue", (*fsm.Machine).NextLeaseDue, func(ctx context.Context, now int64) (bool, error) {
		var due []*proto.QueueRef
		n.View(func(m *fsm.Machine) { due = m.DueLeases(now) })
		if len(due) == 0 {
			return false, nil
		}
		cmds := make([]*proto.Command, len(due))
		for i, q := range due {
			cmds[i] = &proto.Command{Cmd: &proto.Command_ExpireQueue{ExpireQueue: &proto.ExpireQueue{Queue: q}}}
		}
		_, err := n.SubmitBatch(ctx, cmds)
		return err == nil, err
	})
}

// consumerTimeoutLoop proposes ConsumerTimeout for each channel whose
// oldest delivery went unacknowledged past its consumer timeout, in one
// entry. The node's default travels in the command, so every replica
// decides with the same one.
func (n *Node) consumerTimeoutLoop(ctx context.Context) {
	def := max(n.cfg.ConsumerTimeout.Milliseconds(), 0)
	next := func(m *fsm.Machine) (int64, bool) { return m.NextConsumerTimeout(def) }
	n.dueLoop(ctx, "consumer-timeout", next, func(ctx context.Context, now int64) (bool, error) {
		var due []*proto.ChannelRef
		n.View(func(m *fsm.Machine) { due = m.DueConsumerTimeouts(now, def) })
		if len(due) == 0 {
			return false, nil
		}
		cmds := make([]*proto.Command, len(due))
		for i, ch := range due {
			cmds[i] = &proto.Command{Cmd: &proto.Command_ConsumerTimeout{ConsumerTimeout: &proto.ConsumerTimeout{Channel: ch, DefaultMs: def}}}
		}
		_, err := n.SubmitBatch(ctx, cmds)
		return err == nil, err
	})
}

// delayedLoop releases the messages of x-delayed-message exchanges, and
// from protocol level 8 the returned messages waiting out their queue's
// delayed retry (fsm/apply_retry.go), with one ReleaseDelayed: it
// sleeps on the Clock until the earliest due time, then proposes
// ReleaseDelayed, one bounded batch per entry, until nothing is due. The
// state machine decides what is due by the entry's stamp, so a proposal
// made early or repeated by a new leader releases nothing early or twice;
// the messages stay in the state until an entry releases them, so none is
// lost to a leader change or a restart.
//
// Unlike dueLoop's, progress is judged by the head message, not the due
// time: a burst due in one millisecond keeps the same due time over many
// batches, and only a head that a committed release left in place (a
// refusal: a server of the configuration lacks the protocol) backs off.
func (n *Node) delayedLoop(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		_, applied := n.group.Applied().Load()
		var due int64
		var seq uint64
		var ok bool
		n.View(func(m *fsm.Machine) { due, seq, ok = m.NextRelease() })
		var timer Timer
		if ok {
			now := n.stamp.peek()
			if due <= now {
				res, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_ReleaseDelayed{
					ReleaseDelayed: &proto.ReleaseDelayed{Limit: fsm.DelayedReleaseBatch}}})
				if ctx.Err() != nil {
					return
				}
				if err == nil && res.GetCode() != 0 {
					n.log.Warn("release of delayed messages refused", "code", res.GetCode(), "text", res.GetText())
				}
				if err != nil {
					n.log.Warn("proposal failed", "what", "release-delayed", "err", err)
				}
				var seq2 uint64
				var ok2 bool
				n.View(func(m *fsm.Machine) { _, seq2, ok2 = m.NextRelease() })
				if err == nil && (!ok2 || seq2 != seq) {
					backoff = 0
					continue
				}
				backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
				timer = n.cfg.Clock.NewTimer(backoff)
				applied = nil // other entries must not cut the backoff short
			} else {
				timer = n.cfg.Clock.NewTimer(time.Duration(due-now) * time.Millisecond)
			}
		}
		if !awaitDue(ctx, timer, applied) {
			return
		}
	}
}
