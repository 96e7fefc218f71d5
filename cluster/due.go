package cluster

import (
	"context"
	"time"

	"github.com/raftmq/raftmq/cluster/clock"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// dueDuties are the duties of g's leader that fall due on the log clock,
// each a loop of the term: the deaths of messages (expiryLoop), the
// leases of queues (leaseLoop), the consumer timeouts
// (consumerTimeoutLoop) and the delayed releases (delayedLoop), decided
// in g's own log, the metadata group's or a queue group's. Every one runs
// on dueLoop (runDue), each on its own goroutine: one goroutine for all
// would let a slow proposal of one duty hold back the others' deadlines.
// Node-down is the metadata leader's reconcile's (leader.go).
func (n *Node) dueDuties(g *group.Group) []func(context.Context) {
	return []func(context.Context){
		func(ctx context.Context) { n.expiryLoop(ctx, g) },
		func(ctx context.Context) { n.leaseLoop(ctx, g) },
		func(ctx context.Context) { n.consumerTimeoutLoop(ctx, g) },
		func(ctx context.Context) { n.delayedLoop(ctx, g) },
	}
}

// dueProgress is how a duty's loop tells that a proposal moved its work.
type dueProgress int

const (
	// byDeadline: a proposal at stamp now covers all the work due by
	// now, so work due at or before the stamp of the last proposal is
	// stuck; the backoff starts over at the first proposal for later
	// work, and a failed proposal is retried after 100 ms. The deaths,
	// leases and consumer timeouts.
	byDeadline dueProgress = iota
	// byHead: a proposal takes one bounded batch, so a burst due in one
	// millisecond keeps its due time over many proposals; only a head
	// that a committed proposal left in place is stuck (a refusal: a
	// server of the configuration lacks the protocol). The backoff starts
	// over once a proposal moves the head, and a failed proposal backs
	// off like a stuck one. The delayed releases.
	byHead
)

// A dueDuty is one duty of dueDuties.
type dueDuty struct {
	what string
	log  *group.Group // whose machine it reads and whose log it proposes to
	// next reports when the duty's earliest work falls due (ok: there is
	// some) and, for byHead, which item heads it.
	next     func(m *fsm.Machine) (at int64, head uint64, ok bool)
	propose  func(ctx context.Context, now int64) (proposed bool, err error)
	progress dueProgress
	// pace, if set, is the least log time from one proposal to the next
	// when the work now due fell due after the last one (work due before
	// it is a batch the last one had no room for, and goes at once).
	// Work that falls due at a steady rate is then taken a pace's worth
	// per entry rather than a commit round trip's: each entry costs every
	// replica an append, a sync and a round trip however little it
	// carries.
	pace time.Duration
}

// dueLoop runs a duty of g judged byDeadline (see runDue).
func (n *Node) dueLoop(ctx context.Context, g *group.Group, what string,
	next func(m *fsm.Machine) (int64, bool), propose func(ctx context.Context, now int64) (bool, error)) {
	n.runDue(ctx, dueDuty{what: what, log: g, propose: propose, progress: byDeadline,
		next: func(m *fsm.Machine) (int64, uint64, bool) {
			at, ok := next(m)
			return at, 0, ok
		}})
}

// runDue is the shape of every due duty's scheduler: sleep on the Clock
// until next() falls due, then propose(now), where now is the least
// stamp the entry can get; wake early after every apply (a new, earlier
// deadline may have appeared). If a proposal left its work stuck (the
// state machine disagreed; d.progress says how that shows), back off
// before proposing again, and let no apply cut the backoff short.
func (n *Node) runDue(ctx context.Context, d dueDuty) {
	lastProposed := int64(-1 << 63) // the stamp of the last proposal
	var lastHead uint64             // the head at the last proposal
	proposedOnce := false
	judge := false // byHead: a proposal went through and its effect is unseen
	backoff := time.Duration(0)
	retry := false // the backoff ran out: propose even if it looks stuck
	// The backoff paces retries in real time, as the retry of a failed
	// byDeadline proposal does: it is not a deadline of log time, and a
	// clock that stands still (a test's fake one between its steps) must
	// not hold the retry of work already due.
	backOff := func(why string, at int64) bool {
		backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
		n.log.Debug(why, "what", d.what, "group", d.log.ID(), "deadline", at, "backoff", backoff)
		if !sleepCtx(ctx, backoff) {
			return false
		}
		retry = true
		return true
	}
	for {
		_, applied := d.log.Applied().Load()
		var at int64
		var head uint64
		var ok bool
		d.log.State().View(func(m *fsm.Machine) { at, head, ok = d.next(m) })
		moved := !ok || !proposedOnce || head != lastHead
		if judge && moved {
			backoff = 0
		}
		judge = false
		var timer clock.Timer
		if ok {
			now := n.clocks.Stamper().Peek()
			stuck := at <= lastProposed
			if d.progress == byHead {
				stuck = !moved
			}
			switch {
			case at <= now && stuck && !retry:
				if !backOff("due work still due after its proposal", at) {
					return
				}
				continue
			case at <= now && d.pace > 0 && proposedOnce && at > lastProposed && now < lastProposed+d.pace.Milliseconds():
				// Work already due waits out the pace: no apply can make
				// it go sooner, so only the timer wakes the loop.
				t, armed := n.timerFrom(now, lastProposed+d.pace.Milliseconds())
				if armed && !awaitDue(ctx, t, nil) {
					return
				}
				continue
			case at <= now:
				retry = false
				proposed, err := d.propose(ctx, now)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					n.log.Warn("proposal failed", "what", d.what, "group", d.log.ID(), "err", err)
					if d.progress == byHead {
						if !backOff("due work's proposal failed", at) {
							return
						}
					} else if !sleepCtx(ctx, 100*time.Millisecond) {
						return
					}
					continue
				}
				if proposed {
					if d.progress == byDeadline && at > lastProposed {
						backoff = 0
					}
					lastProposed, lastHead, proposedOnce = now, head, true
					judge = d.progress == byHead
					continue
				}
				timer = n.cfg.Clock.NewTimer(50 * time.Millisecond)
			default:
				var armed bool
				if timer, armed = n.timerFrom(now, at); !armed {
					continue
				}
			}
		}
		if !awaitDue(ctx, timer, applied) {
			return
		}
	}
}

// timerFrom arms a timer on the node's clock that fires once log time,
// now at now (a Peek), reaches at. The timer counts from when it is armed,
// so log time that moved on since the Peek would make it late by as much:
// a clock that jumped in between (a test's fake clock, stepped once and
// then awaited) would hold the duty until the clock jumps again. ok is
// false then, and the caller reads the time again.
func (n *Node) timerFrom(now, at int64) (t clock.Timer, ok bool) {
	t = n.cfg.Clock.NewTimer(time.Duration(at-now) * time.Millisecond)
	if n.clocks.Stamper().Peek() != now {
		t.Stop()
		return nil, false
	}
	return t, true
}

// awaitDue waits for a scheduler's timer (nil: none), the next apply
// (applied, nil to ignore applies), or the end of ctx, and reports whether
// the scheduler goes on.
func awaitDue(ctx context.Context, timer clock.Timer, applied <-chan struct{}) bool {
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

// expiryLoop proposes ONE Expire naming every queue of g with a message
// due.
func (n *Node) expiryLoop(ctx context.Context, g *group.Group) {
	n.dueLoop(ctx, g, "expire", (*fsm.Machine).NextDeadline, func(ctx context.Context, now int64) (bool, error) {
		var due []*proto.QueueRef
		g.State().View(func(m *fsm.Machine) { due = m.DueExpiries(now) })
		if len(due) == 0 {
			return false, nil
		}
		res, err := g.Submitter().SubmitBatch(ctx, []*proto.Command{{Cmd: &proto.Command_Expire{Expire: &proto.Expire{Queues: due}}}})
		if err == nil && res[0].GetCode() != 0 {
			n.log.Warn("expire refused", "group", g.ID(), "code", res[0].GetCode(), "text", res[0].GetText())
		}
		return err == nil, err
	})
}

// leaseLoop proposes ExpireQueue for each queue whose x-expires lease is
// due, in one entry.
func (n *Node) leaseLoop(ctx context.Context, g *group.Group) {
	n.dueLoop(ctx, g, "expire-queue", (*fsm.Machine).NextLeaseDue, func(ctx context.Context, now int64) (bool, error) {
		var due []*proto.QueueRef
		g.State().View(func(m *fsm.Machine) { due = m.DueLeases(now) })
		if len(due) == 0 {
			return false, nil
		}
		cmds := make([]*proto.Command, len(due))
		for i, q := range due {
			cmds[i] = &proto.Command{Cmd: &proto.Command_ExpireQueue{ExpireQueue: &proto.ExpireQueue{Queue: q}}}
		}
		res, err := g.Submitter().SubmitBatch(ctx, cmds)
		for i, r := range res {
			// A deletion nobody asked for is worth a line: an operator
			// asking where a queue went finds when its lease ran out, in
			// the log's time.
			if r.GetQueue() != "" && i < len(due) {
				msg := "queue deleted: its x-expires lease ran out"
				if g != n.group {
					// fsm lease.go: the metadata deletes it next.
					msg = "queue ended in its queue group: its lease ran out"
				}
				n.log.Info(msg, "group", g.ID(), "vhost", due[i].GetVhost(),
					"queue", due[i].GetName(), "log_time", time.UnixMilli(now).UTC().Format(time.RFC3339Nano), "index", r.GetIndex())
			}
		}
		return err == nil, err
	})
}

// consumerTimeoutLoop proposes ConsumerTimeout for each channel whose
// oldest delivery went unacknowledged past its consumer timeout, in one
// entry. The node's default travels in the command, so every replica
// decides with the same one.
func (n *Node) consumerTimeoutLoop(ctx context.Context, g *group.Group) {
	def := max(n.cfg.ConsumerTimeout.Milliseconds(), 0)
	next := func(m *fsm.Machine) (int64, bool) { return m.NextConsumerTimeout(def) }
	n.dueLoop(ctx, g, "consumer-timeout", next, func(ctx context.Context, now int64) (bool, error) {
		var due []*proto.ChannelRef
		g.State().View(func(m *fsm.Machine) { due = m.DueConsumerTimeouts(now, def) })
		if len(due) == 0 {
			return false, nil
		}
		cmds := make([]*proto.Command, len(due))
		for i, ch := range due {
			cmds[i] = &proto.Command{Cmd: &proto.Command_ConsumerTimeout{ConsumerTimeout: &proto.ConsumerTimeout{Channel: ch, DefaultMs: def}}}
		}
		_, err := g.Submitter().SubmitBatch(ctx, cmds)
		return err == nil, err
	})
}

// releasePace is the least time between two ReleaseDelayed of a group for
// messages that fell due after the earlier one (dueDuty.pace). With
// 1,000,000 waiting and about 1,700 a second falling due, proposing at
// every commit round trip made entries of about 4 messages, each costing
// every replica an append, a sync and a round trip, and the releases then
// waited for the CPU that cost (docs/performance.md).
const releasePace = 10 * time.Millisecond

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
// It runs on runDue, its progress judged byHead: one due time can take
// many batches.
func (n *Node) delayedLoop(ctx context.Context, g *group.Group) {
	n.runDue(ctx, dueDuty{what: "release-delayed", log: g, next: (*fsm.Machine).NextRelease, progress: byHead, pace: releasePace,
		propose: func(ctx context.Context, now int64) (bool, error) {
			res, err := g.Submitter().SubmitBatch(ctx, []*proto.Command{{Cmd: &proto.Command_ReleaseDelayed{
				ReleaseDelayed: &proto.ReleaseDelayed{Limit: fsm.DelayedReleaseBatch}}}})
			if err == nil && res[0].GetCode() != 0 {
				n.log.Warn("release of delayed messages refused", "group", g.ID(), "code", res[0].GetCode(), "text", res[0].GetText())
			}
			return err == nil, err
		}})
}
