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

// Refuser is implemented by a Broker whose node can stop taking clients
// without being told to Pause first: a process that resumes from a pause
// learns only at its watch's next check whether the cluster declared it
// down meanwhile, and a client that connects before that check would be
// opened and then closed with 320. Refusing says why the node takes no
// clients now, "" when it takes them.
type Refuser interface {
	Refusing() string
}

// refusing is why the broker's node takes no clients now, "" when it
// takes them or cannot tell.
func (s *Server) refusing() string {
	if b, ok := s.node().(Refuser); ok {
		return b.Refusing()
	}
	return ""
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

// noteEpoch records the epoch of a delivery a log assigned to the
// channel. A log's tags grow in its apply order and so do epochs, so the
// channel keeps, for each group's log, one entry per epoch it saw
// deliveries in, not one per delivery (the logs' tags are unrelated, so
// each has its own list): the ledger may hold a delivery (look-ahead,
// consume-ok) and write it much later, and it must still be checked as
// what it was. Locks: ch.mu held.
func (ch *channel) noteEpoch(t logRef, epoch uint64) {
	es := ch.epochs[t.group]
	if n := len(es); n == 0 || es[n-1].epoch != epoch {
		if ch.epochs == nil {
			ch.epochs = map[uint32][]tagEpoch{}
		}
		ch.epochs[t.group] = append(es, tagEpoch{from: t.tag, epoch: epoch})
	}
}

// epochOf is the epoch a delivery was decided in. Locks: ch.mu held.
func (ch *channel) epochOf(t logRef) uint64 {
	es := ch.epochs[t.group]
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].from <= t.tag {
			return es[i].epoch
		}
	}
	return 0
}

// sendDecided queues a content method the node decided in epoch; ref and
// t name it when it is an acknowledged delivery (or get-ok), which the
// writer drops if its log took it back meanwhile.
func (c *conn) sendDecided(channel uint16, m wire.Method, props *wire.Properties, body []byte, epoch uint64, ref *proto.ChannelRef, t logRef) {
	c.sendMarked(channel, m, props, body, &mark{epoch: epoch, ch: ref, group: t.group, tag: t.tag})
}

// sendMarked queues a content method under mk (sendDecided).
func (c *conn) sendMarked(channel uint16, m wire.Method, props *wire.Properties, body []byte, mk *mark) {
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
// connection ends first, every stale frame is dropped.
//
// A delivery the log still holds is written, unless its message died
// meanwhile: a silence of a second (a stalled process, a node cut off
// for less than it takes to be declared down) would otherwise hand a
// consumer a message with a TTL of 0 a second after its publish was
// confirmed. Past its deadline by more than overdueGrace, the rule for a
// delivery that reaches the node that late (overdueAt), it is dropped
// and taken back from its channel, which requeues it unseen: the log
// kills it (dead-lettered as expired) as if it had never left the
// queue. Writer only (guardBeating runs it while the writer waits).
func (c *conn) guard(b []byte, marks []mark) []byte {
	if !c.decidedBeforeASilence(marks) {
		return b
	}
	cur := c.srv.epoch()
	fenced := c.fenced >= cur || c.fence()
	if fenced {
		cur = c.fenced // what was decided before it is checked
	}
	// A delivery of another group's log is checked in that log's applied
	// state, once a Tick proposed there after the silence is applied too:
	// here, or on a member when this node does not run the log.
	var groups map[uint32]groupCheck
	for _, m := range marks {
		if fenced && m.ch != nil && m.group != 0 && m.epoch < cur {
			if _, done := groups[m.group]; !done {
				if groups == nil {
					groups = map[uint32]groupCheck{}
				}
				groups[m.group] = c.checkGroup(m.group, cur, marks)
			}
		}
	}
	nowMs := time.Now().UnixMilli()
	out := make([]byte, 0, len(b))
	at, dropped := 0, 0
	var dead []mark
	for _, m := range marks {
		stale := m.epoch < cur
		stands := !stale || fenced && (m.ch == nil || c.stands(groups, m))
		if stands && (!stale || !m.died(nowMs)) {
			continue
		}
		if stands {
			dead = append(dead, m)
		} else {
			dropped++
		}
		out = append(out, b[at:m.start]...)
		at = m.end
	}
	out = append(out, b[at:]...)
	if dropped > 0 {
		c.logger().Info("dropped frames decided before a silence of this node: the log no longer stands for them",
			"frames", dropped, "caught_up", fenced)
	}
	if len(dead) > 0 {
		taken := 0
		for _, m := range dead {
			if c.takeBack(m) {
				taken++
			}
		}
		c.logger().Info("dropped deliveries decided before a silence of this node: their messages died meanwhile, and go back unseen to die in the log",
			"deliveries", len(dead), "taken_back", taken)
	}
	return out
}

// decidedBeforeASilence reports whether any of marks was decided in an
// epoch before the node's current one: guard has work to do.
func (c *conn) decidedBeforeASilence(marks []mark) bool {
	if len(marks) == 0 {
		return false
	}
	cur := c.srv.epoch()
	for _, m := range marks {
		if m.epoch < cur {
			return true
		}
	}
	return false
}

// groupCheck is what the writer learnt of a queue group's log after a
// silence of its node: whether it caught up with it (ok), and whether
// the log is read here (this node runs it) or the deliveries asked about
// were read on a member: those it still holds are in far.
type groupCheck struct {
	ok, here bool
	far      map[chanTag]bool
}

// chanTag names a delivery of one log on a connection: its channel's
// number and its tag in the log.
type chanTag struct {
	channel uint32
	tag     uint64
}

// checkGroup brings the writer's view of group's log past the silence of
// epoch: for a log this node runs, a Tick proposed there is applied here
// (fenceGroup), and the applied state is read as each delivery is
// checked; for a log it does not run, whose state it cannot read, a
// member is asked which of the deliveries of marks decided before the
// silence it still holds, after a Tick of its own. ok is false when the
// connection failed or ended first. Writer only.
func (c *conn) checkGroup(group uint32, epoch uint64, marks []mark) groupCheck {
	tags := map[uint32][]uint64{}
	refs := map[uint32]*proto.ChannelRef{}
	for _, m := range marks {
		if m.ch != nil && m.group == group && m.epoch < epoch {
			k := m.ch.GetChannel()
			tags[k], refs[k] = append(tags[k], m.tag), m.ch
		}
	}
	far := map[chanTag]bool{}
	for k, ts := range tags {
		here := false
		ok := c.retryFence(func() (bool, error) {
			unacked, h, err := c.srv.node().FarUnacked(c.ctx, group, refs[k], ts)
			if err != nil {
				return false, err
			}
			here = h
			for _, t := range unacked {
				far[chanTag{k, t}] = true
			}
			return true, nil
		}, "holding frames decided before a silence of this node until a member of their group's log answers", "group", group)
		if !ok {
			return groupCheck{}
		}
		if here {
			return groupCheck{ok: c.fenceGroup(group, epoch), here: true}
		}
	}
	return groupCheck{ok: true, far: far}
}

// stands reports whether the log that assigned m, an acknowledged
// delivery decided before a silence of this node, still holds it for its
// channel, as the writer learnt after the silence (groups). Writer only.
func (c *conn) stands(groups map[uint32]groupCheck, m mark) bool {
	if m.group != 0 {
		g := groups[m.group]
		if !g.ok {
			return false
		}
		if !g.here {
			return g.far[chanTag{m.ch.GetChannel(), m.tag}]
		}
	}
	return len(c.srv.node().Unacked(m.group, m.ch, []uint64{m.tag})) > 0
}

// died reports whether m is a consumer's delivery whose message died by
// nowMs, past the grace a late delivery has (overdueAt).
func (m mark) died(nowMs int64) bool {
	return m.wire != 0 && m.deadline != 0 && pastGrace(m.deadline, nowMs)
}

// takeBack has the channel of m, a delivery the writer will not write,
// take it back for an unseen requeue; false when the channel is gone (its
// close names what the client was sent) or numbered it otherwise.
// Writer only.
func (c *conn) takeBack(m mark) bool {
	ch := c.channel(uint16(m.ch.GetChannel()))
	return ch != nil && ch.takeBack(m.wire, logRef{m.group, m.tag})
}

// fence submits a Tick and waits until it is applied here, with no
// silence meanwhile: every NodeDown of this node proposed during the
// silence is then applied, and the applied state is final for what the
// node decided before it. It gives up when the connection fails or
// ends. Writer only.
func (c *conn) fence() bool {
	return c.retryFence(func() (bool, error) {
		e0 := c.srv.epoch()
		_, err := c.srv.node().Submit(c.ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
		if err != nil || c.srv.epoch() != e0 {
			return false, err
		}
		c.fenced = e0
		return true, nil
	}, "holding frames decided before a silence of this node until it catches up")
}

// retryFence runs try until it reports done, waiting out an error with a
// growing backoff (a silence met on the way retries at once); it gives
// up when the connection fails or ends. Writer only.
func (c *conn) retryFence(try func() (done bool, err error), waiting string, args ...any) bool {
	wait := 20 * time.Millisecond
	for {
		done, err := try()
		if done {
			return true
		}
		if err != nil {
			c.logger().Debug(waiting, append(args, "err", err)...)
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

// fenceGroup is fence for the log of a group other than the metadata
// group: a Tick proposed there after the silence is applied here, so the
// applied state of that log is final for what it assigned before. It
// remembers the epoch it caught up with, gives up when the connection
// fails or ends. Writer only.
func (c *conn) fenceGroup(group uint32, epoch uint64) bool {
	if c.fencedGroups[group] >= epoch {
		return true
	}
	return c.retryFence(func() (bool, error) {
		_, err := c.srv.node().SubmitGroup(c.ctx, group, []*proto.Command{{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}})
		if err != nil {
			return false, err
		}
		if c.fencedGroups == nil {
			c.fencedGroups = map[uint32]uint64{}
		}
		c.fencedGroups[group] = epoch
		return true, nil
	}, "holding frames decided before a silence of this node until its group's log catches up", "group", group)
}
