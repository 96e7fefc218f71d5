package cluster

import (
	"testing"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// epochRecorder is an EpochSink that keeps what it was handed.
type epochRecorder struct {
	fsm.Sink
	epochs []uint64
}

func (r *epochRecorder) DeliverIn(_ *fsm.Delivery, epoch uint64) { r.epochs = append(r.epochs, epoch) }

// A pause of the process between two effects of one entry (the apply
// path checks for a stall once per batch of entries): the effects after
// it are held, and a goroutine that resumes before the watch (a socket
// writer) sees a new silence epoch, not the one the effects before the
// pause were decided in.
func TestSilence_PauseBetweenEffectsIsSeenByTheGateAndTheEpoch(t *testing.T) {
	rec := &epochRecorder{}
	n := &Node{cfg: Config{NodeDownAfter: time.Second}, watch: newQuorumWatch()}
	n.cfg.Effects = rec
	g := n.effects()
	w := n.watch
	w.lastCheck = time.Now()

	d := &fsm.Delivery{Consumer: &proto.ConsumerRef{Tag: "c"}, DeliveryTag: 1}
	g.Deliver(d)
	if len(rec.epochs) != 1 {
		t.Fatalf("a delivery of a live node was not passed on: %v", rec.epochs)
	}
	before := rec.epochs[0]
	if e := n.SilenceEpoch(); e != before {
		t.Fatalf("SilenceEpoch() = %d with no silence, the delivery was decided in %d", e, before)
	}

	// The process stops for longer than NodeDownAfter/2: the watch did
	// not run meanwhile.
	w.mu.Lock()
	w.lastCheck = time.Now().Add(-n.suspectAfter())
	w.mu.Unlock()
	if e := n.SilenceEpoch(); e <= before {
		t.Fatalf("SilenceEpoch() = %d after a stall, want more than %d", e, before)
	}
	g.Deliver(&fsm.Delivery{Consumer: &proto.ConsumerRef{Tag: "c"}, DeliveryTag: 2})
	if len(rec.epochs) != 1 || len(w.held) != 1 {
		t.Fatalf("the delivery after the stall was passed on (%v), not held (%d held)", rec.epochs, len(w.held))
	}

	// The gate alone sees the stall too, when it comes first.
	w.mu.Lock()
	w.suspect, w.held = false, nil
	w.lastCheck = time.Now().Add(-n.suspectAfter())
	w.mu.Unlock()
	g.Deliver(&fsm.Delivery{Consumer: &proto.ConsumerRef{Tag: "c"}, DeliveryTag: 3})
	if len(rec.epochs) != 1 || len(w.held) != 1 {
		t.Fatalf("a delivery applied right after a stall was passed on (%v), not held (%d held)", rec.epochs, len(w.held))
	}
}
