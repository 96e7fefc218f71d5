package amqp

import (
	"testing"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// A closing channel's close follows every acknowledgement in flight,
// also when some of them failed while it waited: a close that overtook
// one had the log return deliveries the client saw, and acked, without
// the redelivered flag. Three batches go in flight; the first two are
// refused (the first raised before the close, the second while the close
// waits), the third is still on its way. drain must wait for it.
func TestAckSender_DrainWaitsForEveryFlightWhateverFailed(t *testing.T) {
	ref := &proto.ChannelRef{Node: "node-a", Connection: "c1", Channel: 1}
	entered := make(chan uint64, 3)
	release := map[uint64]chan *wire.Error{1: make(chan *wire.Error), 2: make(chan *wire.Error), 3: make(chan *wire.Error)}
	answered := make(chan uint64, 3)
	a := newAckSender(func(run []item) *wire.Error {
		tag := ackTags(run[0].cmd)[0]
		entered <- tag
		e := <-release[tag]
		answered <- tag
		return e
	}, func() {})
	refused := wire.ChanError(replycode.PreconditionFailed, 60, 80, "unknown delivery tag")
	for tag := uint64(1); tag <= 3; tag++ {
		a.add([]item{settleItem(ref, tag)})
		if got := <-entered; got != tag {
			t.Fatalf("batch %d in flight, want %d", got, tag)
		}
	}
	release[1] <- refused
	<-answered
	// The worker raises the first failure and the channel closes.
	a.mu.Lock()
	for a.err == nil {
		a.changed.Wait()
	}
	a.mu.Unlock()
	if a.failure() != refused {
		t.Fatal("the first failure is not the refusal")
	}
	drained := make(chan *wire.Error, 1)
	go func() { drained <- a.drain() }()
	release[2] <- refused
	<-answered
	select {
	case <-drained:
		t.Fatal("drain returned at the second failure, with a batch still in flight")
	case <-time.After(200 * time.Millisecond):
		// Nothing to await: drain must not return before the last batch
		// is answered, and that waits for this test.
	}
	release[3] <- nil
	if tag := <-answered; tag != 3 {
		t.Fatalf("answered %d, want 3", tag)
	}
	if e := <-drained; e != refused {
		t.Fatalf("drain returned %v, want the second failure, not yet raised", e)
	}
	a.end()
}
