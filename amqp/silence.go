package amqp

import (
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Silences is implemented by a Broker whose node can fall silent: its
// process paused (SIGSTOP, a paused VM, a stall) or cut off from the
// majority of the cluster, long enough for the cluster to declare it
// down and hand what its consumers held to others.
type Silences interface {
	// SilenceEpoch changes whenever the node finds it was silent; it
	// never goes back. What was decided in an earlier epoch than the
	// current one is carried out only once a command proposed after the
	// silence has been applied on this node and the applied state says
	// that it still stands.
	SilenceEpoch() uint64
}

// epoch is the node's current silence epoch; 0 when its broker knows no
// silences (or before SetBroker).
func (s *Server) epoch() uint64 {
	if b, ok := s.node().(Silences); ok {
		return b.SilenceEpoch()
	}
	return 0
}

// DeliverIn is Deliver for a delivery the node decided in the given
// silence epoch (cluster.EpochSink).
func (s *Server) DeliverIn(d *fsm.Delivery, epoch uint64) {
	ch := s.channelOf(d.Consumer.GetChannel())
	if ch == nil {
		s.log.Debug("delivery for an unknown channel", "consumer", d.Consumer.GetTag())
		return
	}
	ch.deliver(d, epoch)
}

// tagEpoch says that the channel's deliveries from log tag from on were
// decided in epoch (until the next tagEpoch).
type tagEpoch struct{ from, epoch uint64 }

// noteEpoch records the epoch of a delivery the log assigned to the
// channel. Log tags grow in apply order and so do epochs, so the channel
// keeps one entry per epoch it saw deliveries in, not one per delivery:
// the ledger may hold a delivery (look-ahead, consume-ok) and write it
// much later, and it must still be checked as what it was. Locks: ch.mu
// held.
func (ch *channel) noteEpoch(logTag, epoch uint64) {
	if n := len(ch.epochs); n == 0 || ch.epochs[n-1].epoch != epoch {
		ch.epochs = append(ch.epochs, tagEpoch{from: logTag, epoch: epoch})
	}
}

// epochOf is the epoch a delivery was decided in. Locks: ch.mu held.
func (ch *channel) epochOf(logTag uint64) uint64 {
	for i := len(ch.epochs) - 1; i >= 0; i-- {
		if ch.epochs[i].from <= logTag {
			return ch.epochs[i].epoch
		}
	}
	return 0
}

// sendDecided queues a content method the node decided in epoch; ref and
// logTag name it when it is an acknowledged delivery (or get-ok), which
// the writer drops if the log took it back meanwhile.
func (c *conn) sendDecided(channel uint16, m wire.Method, props *wire.Properties, body []byte, epoch uint64, ref *proto.ChannelRef, logTag uint64) {
	mk := &mark{epoch: epoch, ch: ref, tag: logTag}
	c.out.appendMarked(mk, func(b []byte) []byte {
		if !m.HasContent() {
			return wire.AppendMethodFrame(b, channel, m)
		}
		return wire.AppendContent(b, channel, m, props, body, c.frameMax)
	})
}

// fenceBackoff bounds the pause between two attempts at a fence.
const fenceBackoff = time.Second

// guard is the writer's check of what it took from the queue before it
// writes it: frames decided in an epoch before the current one wait
// until a Tick proposed now has been applied here (fence), and then
// deliveries the log no longer holds as unacknowledged on their channel
// are dropped (the cluster declared this node down, or closed the
// channel, and gave them to others). The connection ends soon after
// either way: its node's NodeDown or the channel's close follow. If the
// connection ends first, every stale frame is dropped. Writer only.
func (c *conn) guard(b []byte, marks []mark) []byte {
	if len(marks) == 0 {
		return b
	}
	cur := c.srv.epoch()
	oldest := marks[0].epoch
	for _, m := range marks {
		oldest = min(oldest, m.epoch)
	}
	if oldest >= cur {
		return b
	}
	fenced := c.fenced >= cur || c.fence()
	if fenced {
		cur = c.fenced // what was decided before it is checked
	}
	node := c.srv.node()
	out := make([]byte, 0, len(b))
	at, dropped := 0, 0
	for _, m := range marks {
		stale := m.epoch < cur
		if !stale || fenced && (m.ch == nil || len(node.Unacked(m.ch, []uint64{m.tag})) > 0) {
			continue
		}
		out = append(out, b[at:m.start]...)
		at = m.end
		dropped++
	}
	out = append(out, b[at:]...)
	if dropped > 0 {
		c.logger().Info("dropped frames decided before a silence of this node: the log no longer stands for them",
			"frames", dropped, "caught_up", fenced)
	}
	return out
}

// fence submits a Tick and waits until it is applied here, with no
// silence meanwhile: every NodeDown of this node proposed during the
// silence is then applied, and the applied state is final for what the
// node decided before it. It gives up when the connection fails or
// ends. Writer only.
func (c *conn) fence() bool {
	wait := 20 * time.Millisecond
	for {
		e0 := c.srv.epoch()
		_, err := c.srv.node().Submit(c.ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
		if err == nil && c.srv.epoch() == e0 {
			c.fenced = e0
			return true
		}
		if err != nil {
			c.logger().Debug("holding frames decided before a silence of this node until it catches up", "err", err)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.ctx.Done():
			case <-c.failed:
			}
			t.Stop()
			wait = min(2*wait, fenceBackoff)
		}
		select {
		case <-c.ctx.Done():
			return false
		case <-c.failed:
			return false
		default:
		}
	}
}
