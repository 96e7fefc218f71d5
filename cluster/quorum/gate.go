package quorum

import (
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Sink is the gate in front of Config.Effects: it passes effects on
// unless the node is suspect, when they are held until it has caught up
// (flush). Nil without Config.Effects.
func (w *Watch) Sink() fsm.Sink {
	if w.gate == nil {
		return nil
	}
	return w.gate
}

// gate is the watch's Sink; built once, so handing it out allocates
// nothing.
type gate struct {
	w      *Watch
	next   fsm.Sink
	epochs EpochSink // next, when it takes epochs
}

// deliverIn hands d to next with its epoch when next takes one.
func (g *gate) deliverIn(d *fsm.Delivery, epoch uint64) {
	if g.epochs != nil {
		g.epochs.DeliverIn(d, epoch)
		return
	}
	g.next.Deliver(d)
}

// hold keeps e while the node is suspect and reports whether it did,
// and the silence epoch it decided in. A pause of the process in the
// middle of an entry's effects makes it suspect here, before the next
// one. Locks: none.
func (g *gate) hold(e heldEffect) (held bool, epoch uint64) {
	w := g.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteStall()
	if !w.suspect && !w.flushing {
		return false, w.gen
	}
	w.held = append(w.held, e)
	return true, w.gen
}

func (g *gate) Deliver(d *fsm.Delivery) {
	if held, epoch := g.hold(heldEffect{deliver: d}); !held {
		g.deliverIn(d, epoch)
	}
}

// DeliverBy is the gate's Deliver for a delivery decided no later than
// in silence epoch by, as one that came on a stream a member opened to
// this node then: a silence of this node since makes it checked as one
// decided before that silence (the log may have given it to others
// meanwhile), whenever it arrives. A node without effects drops it.
func (w *Watch) DeliverBy(d *fsm.Delivery, by uint64) {
	g := w.gate
	if g == nil {
		return
	}
	if held, epoch := g.hold(heldEffect{deliver: d}); !held {
		g.deliverIn(d, min(epoch, by))
	}
}

func (g *gate) ConsumerCancelled(c *proto.ConsumerRef) {
	if held, _ := g.hold(heldEffect{cancel: c}); !held {
		g.next.ConsumerCancelled(c)
	}
}

func (g *gate) ChannelTimedOut(ch *proto.ChannelRef, timeout int64) {
	if held, _ := g.hold(heldEffect{timedOut: ch, timeout: timeout}); !held {
		g.next.ChannelTimedOut(ch, timeout)
	}
}

func (g *gate) ConsumerTimedOut(c *proto.ConsumerRef, timeout int64, tags []uint64) {
	if held, _ := g.hold(heldEffect{consumerTimedOut: c, timeout: timeout, tags: tags}); !held {
		g.next.ConsumerTimedOut(c, timeout, tags)
	}
}

// VhostDeleted passes on at once, held or not: the connections it ends
// are this node's, whatever the log gave others meanwhile.
func (g *gate) VhostDeleted(name string) {
	if a, ok := g.next.(fsm.AccessSink); ok {
		a.VhostDeleted(name)
	}
}

// UserDeleted passes on at once, as VhostDeleted.
func (g *gate) UserDeleted(name string) {
	if a, ok := g.next.(fsm.AccessSink); ok {
		a.UserDeleted(name)
	}
}

func (g *gate) NodeDown(node string) {
	if held, _ := g.hold(heldEffect{down: node, at: time.Now()}); !held {
		g.next.NodeDown(node)
	}
}
