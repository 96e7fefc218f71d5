package cluster

import (
	"github.com/raftmq/raftmq/cluster/quorum"
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
//     them while the node is suspect of a silence (the quorum watch's
//     Sink, package quorum), then Sinks.Effects, told each delivery's
//     silence epoch when it is an EpochSink;
//   - direct replies from other nodes (Reply, reply.go): Sinks.Replies;
//   - the loss and return of contact with a majority (the quorum watch,
//     package quorum): Sinks.Pauser.

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
	// cluster for NodeDownAfter, and when it has it again (package quorum).
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
// epoch (SilenceEpoch) its node decided it in (quorum.EpochSink).
type EpochSink = quorum.EpochSink

// ReplySink takes the direct replies other nodes send to this node's
// channels (the AMQP server). It must not block.
type ReplySink interface {
	// DirectReply delivers r to the reply consumer its name designates
	// (with r.probe, only reports whether it exists) and reports whether
	// it did.
	DirectReply(r *proto.DirectReply) bool
}

// Pauser is told when this node cannot serve clients because it lost
// contact with a majority of the cluster, and when it can again
// (quorum.Pauser).
type Pauser = quorum.Pauser

// effects is the Sink the adapter hands this node's effects to: the
// quorum watch's gate in front of Sinks.Effects.
func (n *Node) effects() fsm.Sink {
	if n.watch == nil {
		return n.cfg.Effects
	}
	return n.watch.Sink()
}

// streamSink is where the effects of a queue group's stream, opened when
// the node was in silence epoch opened, go: the gate, each delivery as
// decided no later than then (quorum.Watch.DeliverBy). A member keeps
// sending what it decided for this node while the node is silent, and
// what the node reads of it after its silence the log may have given to
// others meanwhile.
func (n *Node) streamSink(opened uint64) fsm.Sink {
	sink := n.effects()
	if n.watch == nil || sink == nil {
		return sink
	}
	return streamSink{Sink: sink, watch: n.watch, opened: opened}
}

// streamSink is the gate for a stream opened in silence epoch opened.
type streamSink struct {
	fsm.Sink
	watch  *quorum.Watch
	opened uint64
}

func (s streamSink) Deliver(d *fsm.Delivery) { s.watch.DeliverBy(d, s.opened) }
