package cluster

import (
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// The node hands back to the server that holds its clients' channels
// (the AMQP server) what is addressed to them, along one chain declared
// here:
//
//   - effects of the applied log: the group's FSM adapter applies an entry
//     and calls FSMHost.Effects with what is addressed to this node
//     (group/fsm_adapter.go), which is Node.effects: the gate that holds
//     them while the node is suspect of a silence (gateSink, quorum.go's
//     watch), then Sinks.Effects, told each delivery's silence epoch when
//     it is an EpochSink (deliverIn);
//   - direct replies from other nodes (Reply, reply.go): Sinks.Replies;
//   - the loss and return of contact with a majority (tellPauser,
//     quorum.go): Sinks.Pauser.

// Sinks are where the node hands what it has for its own clients.
type Sinks struct {
	// Effects receives the effects addressed to this node (deliveries to its
	// consumers, cancellations of its consumers). It is called under the
	// state lock, in log order: it must not block for long nor call back
	// into the node.
	Effects fsm.Sink
	// Replies receives the direct replies other nodes send to this node's
	// channels (nil: they are dropped).
	Replies ReplySink
	// Pauser is told when this node loses contact with a majority of the
	// cluster for NodeDownAfter, and when it has it again (quorum.go).
	Pauser Pauser
}

// Clients is a server that takes all the node has for its clients: the
// AMQP server is one.
type Clients interface {
	EpochSink
	ReplySink
	Pauser
}

// SinksTo hands everything the node has for its clients to c.
func SinksTo(c Clients) Sinks { return Sinks{Effects: c, Replies: c, Pauser: c} }

// EpochSink is a Sink that also learns, with each delivery, the silence
// epoch (SilenceEpoch) its node decided it in. The AMQP server is one: a
// delivery may wait in its buffers past a silence of the node (a paused
// process runs its socket writers first when it resumes), and by then the
// cluster may have declared the node down and handed the message to
// another consumer. The epoch lets it tell such a delivery from one
// decided after the silence, whatever goroutine resumes first.
type EpochSink interface {
	fsm.Sink
	// DeliverIn is Deliver with the epoch the delivery was decided in.
	DeliverIn(d *fsm.Delivery, epoch uint64)
}

// deliverIn hands d to next with its epoch when next takes one.
func deliverIn(next fsm.Sink, d *fsm.Delivery, epoch uint64) {
	if e, ok := next.(EpochSink); ok {
		e.DeliverIn(d, epoch)
		return
	}
	next.Deliver(d)
}

// ReplySink takes the direct replies other nodes send to this node's
// channels (the AMQP server). It must not block.
type ReplySink interface {
	// DirectReply delivers r to the reply consumer its name designates
	// (with r.probe, only reports whether it exists) and reports whether
	// it did.
	DirectReply(r *proto.DirectReply) bool
}

// Pauser is told when this node cannot serve clients because it lost
// contact with a majority of the cluster, and when it can again (the AMQP
// server). Its methods are called in turn, never concurrently, and must
// not call back into the node.
type Pauser interface {
	// Pause closes every client connection, saying reason, and refuses
	// new ones until Resume.
	Pause(reason string)
	// Resume takes clients again.
	Resume()
}

// hold keeps e while the node is suspect and reports whether it did,
// and the silence epoch it decided in. A pause of the process in the
// middle of an entry's effects makes it suspect here, before the next
// one. Locks: none.
func (g gateSink) hold(e heldEffect) (held bool, epoch uint64) {
	w := g.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteStall(g.after)
	if !w.suspect {
		return false, w.gen
	}
	w.held = append(w.held, e)
	return true, w.gen
}

// gateSink passes effects on unless the node is suspect, when they are
// held until it has caught up (flushHeld).
type gateSink struct {
	w     *quorumWatch
	after time.Duration // the node's suspectAfter
	next  fsm.Sink
}

func (g gateSink) Deliver(d *fsm.Delivery) {
	if held, epoch := g.hold(heldEffect{deliver: d}); !held {
		deliverIn(g.next, d, epoch)
	}
}

func (g gateSink) ConsumerCancelled(c *proto.ConsumerRef) {
	if held, _ := g.hold(heldEffect{cancel: c}); !held {
		g.next.ConsumerCancelled(c)
	}
}

func (g gateSink) ChannelTimedOut(ch *proto.ChannelRef, timeout int64) {
	if held, _ := g.hold(heldEffect{timedOut: ch, timeout: timeout}); !held {
		g.next.ChannelTimedOut(ch, timeout)
	}
}

func (g gateSink) ConsumerTimedOut(c *proto.ConsumerRef, timeout int64, tags []uint64) {
	if held, _ := g.hold(heldEffect{consumerTimedOut: c, timeout: timeout, tags: tags}); !held {
		g.next.ConsumerTimedOut(c, timeout, tags)
	}
}

func (g gateSink) NodeDown(node string) {
	if held, _ := g.hold(heldEffect{down: node}); !held {
		g.next.NodeDown(node)
	}
}

// effects is the Sink the adapter hands this node's effects to.
func (n *Node) effects() fsm.Sink {
	if n.cfg.Effects == nil || n.watch == nil {
		return n.cfg.Effects
	}
	return gateSink{w: n.watch, after: n.suspectAfter(), next: n.cfg.Effects}
}
