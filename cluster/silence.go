package cluster

import (
	"time"

	"github.com/raftmq/raftmq/fsm"
)

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

// SilenceEpoch counts this node's silences: it changes whenever the node
// finds it was silent for NodeDownAfter/2 (no contact with a majority of
// the cluster, or its process stalled: the watch did not run that long,
// checked here too, so a goroutine that resumes before the watch sees
// the stall). Something decided in an earlier epoch than the current one
// may have been superseded by the log meanwhile (the node declared down,
// its deliveries requeued to others): it may be carried out only once a
// command proposed after the silence has been applied here and the
// applied state says that it still stands. Epochs never go back.
func (n *Node) SilenceEpoch() uint64 {
	w := n.watch
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteStall(time.Now(), n.suspectAfter())
	return w.gen
}
