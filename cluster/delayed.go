package cluster

import (
	"context"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

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
