package amqp

import (
	"slices"
	"time"

	"github.com/raftmq/raftmq/proto"
)

// resolveGetFor bounds how long a basic.get of unknown outcome is
// resolved and tried again before the connection is closed with 541 (a
// variable for the tests).
var resolveGetFor = 30 * time.Second

// resolveGet settles a basic.get whose outcome is unknown (the leader
// changed under it, the forwarding stream broke) and tries it again,
// rather than closing the connection as it used to. A Tick through the
// queue's log comes back once the node that reads the log applied
// everything committed before it: the failed Get either committed before
// the Tick or never will (raft's log matching). A delivery of it is then
// among the channel's basic.get deliveries in the state that the client
// does not hold; it goes back to the queue unseen (it never reached the
// client, so without the redelivered flag), and the Get is submitted
// again. A Get without ack that committed took its message out at most
// once, as no-ack does. The log is this node's, or for a queue group it
// does not run a member's, which proposes its own Tick (Broker.Gets). It
// returns the result, and the epoch read before the Get that gave it.
func (ch *channel) resolveGet(q string, cmd *proto.Command, err error) (*proto.Result, uint64, error) {
	b := ch.c.srv.node()
	ctx := ch.c.ctx
	deadline := time.Now().Add(resolveGetFor)
	backoff := 20 * time.Millisecond
	for ctx.Err() == nil && time.Now().Before(deadline) {
		ch.c.logger().Info("basic.get of unknown outcome: resolving it from the log", "channel", ch.id, "queue", q, "err", err)
		if err = ch.requeueUnseenGets(q); err == nil {
			epoch := ch.c.srv.epoch()
			var res *proto.Result
			if res, err = b.Submit(ctx, cmd); err == nil {
				return res, epoch, nil
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, time.Second)
	}
	return nil, 0, err
}

// requeueUnseenGets hands back, unseen, the channel's basic.get
// deliveries from q's log that the client does not hold, once a Tick
// through that log has been applied where it is read.
func (ch *channel) requeueUnseenGets(q string) error {
	b := ch.c.srv.node()
	ctx := ch.c.ctx
	group, _, err := b.Gets(ctx, ch.vhost(), q, ch.ref())
	if err != nil {
		return err
	}
	tick := []*proto.Command{{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}}
	if _, err := ch.c.srv.submitTo(ctx, group, tick); err != nil {
		return err
	}
	group, tags, err := b.Gets(ctx, ch.vhost(), q, ch.ref())
	if err != nil {
		return err
	}
	ch.mu.Lock()
	orphans := slices.DeleteFunc(tags, func(t uint64) bool { return ch.led.holds(logRef{group, t}) })
	ch.mu.Unlock()
	if len(orphans) == 0 {
		return nil
	}
	back := []*proto.Command{{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ch.ref(), Tags: orphans, Unseen: true}}}}
	_, err = ch.c.srv.submitTo(ctx, group, back)
	return err
}
