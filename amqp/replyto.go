package amqp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// Direct reply-to, RabbitMQ's way for RPC clients to get replies without a
// reply queue. The requester consumes from the pseudo-queue
// amq.rabbitmq.reply-to in no-ack mode and publishes its requests with
// reply_to amq.rabbitmq.reply-to on the same channel; the broker rewrites
// that reply_to to a name of its own, amq.rabbitmq.reply-to.<suffix>, and
// a responder publishing to the default exchange with that name as routing
// key reaches the requester's channel directly.
//
// Replies never enter the log. RabbitMQ keeps them transient and delivers
// them at most once (the reply consumer cannot acknowledge, there is no
// queue to return them to), so replicating them would cost a commit per
// reply for a guarantee nobody gets. The suffix names the requester's
// node, connection and channel, which is all it takes to route a reply
// from any node: the responder's node hands it to the requester's over
// the internal gRPC service (Replier), the way RabbitMQ's channel process
// sends it to the requester's channel process.
//
// The suffix also carries a key, 128 random bits drawn for each reply
// consumer, and the requester's channel takes a reply only with its
// consumer's key: a client that can guess node, connection and channel
// (they are no secret) still cannot forge a name, and a name dies with its
// consumer (a cancel and a new consume draw a new key), as RabbitMQ's
// channel pid and key do.

const (
	// replyQueue is the pseudo-queue a requester consumes from, and the
	// reply_to a request carries before the broker rewrites it.
	replyQueue = "amq.rabbitmq.reply-to"
	// replyPrefix starts every name a reply can be published to.
	replyPrefix = replyQueue + "."
	// replyKeyLen is the length of a key in a name: 16 random bytes,
	// unpadded URL-safe base64 (no dot, so the name splits unambiguously).
	replyKeyLen = 22
	// maxShortString bounds routing keys, reply_to and queue names.
	maxShortString = 255
)

// replyTimeout bounds how long a responder's channel waits for another
// node to take a reply: a reply is delivered at most once, and a node that
// does not answer must not hold the responder's publishes for longer.
const replyTimeout = 5 * time.Second

// replyConsumer is a channel's direct reply-to consumer. It is no consumer
// of the log: the channel's ledger keeps it.
type replyConsumer struct {
	tag  string
	name string // what the channel's requests carry as reply_to
	key  string
}

// replyAddr is what a reply-to name designates: a channel of a connection
// of a node, and the key of its reply consumer.
type replyAddr struct {
	key     string
	channel uint16
	conn    string
	node    string
}

// name is the reply-to name of a: amq.rabbitmq.reply-to.<key>.<channel>.
// <connection>.<node>. The node goes last: node ids may hold dots, the
// server's connection ids and the keys do not.
func (a replyAddr) name() string {
	return replyPrefix + a.key + "." + strconv.FormatUint(uint64(a.channel), 10) + "." + a.conn + "." + a.node
}

// parseReplyName reads a name made by replyAddr.name; anything else (a
// garbage or truncated name) is not one.
func parseReplyName(name string) (replyAddr, bool) {
	rest, ok := strings.CutPrefix(name, replyPrefix)
	if !ok {
		return replyAddr{}, false
	}
	key, rest, ok := strings.Cut(rest, ".")
	if !ok || len(key) != replyKeyLen {
		return replyAddr{}, false
	}
	num, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return replyAddr{}, false
	}
	ch, err := strconv.ParseUint(num, 10, 16)
	if err != nil || ch == 0 || strconv.FormatUint(ch, 10) != num {
		return replyAddr{}, false
	}
	conn, node, ok := strings.Cut(rest, ".")
	if !ok || conn == "" || node == "" {
		return replyAddr{}, false
	}
	return replyAddr{key: key, channel: uint16(ch), conn: conn, node: node}, true
}

// isReplyRoute reports whether a publish goes to a reply-to name: the
// default exchange routes such a key to a requester's channel, never to a
// queue. The bare amq.rabbitmq.reply-to is routed as a queue name (no
// queue has it), as in RabbitMQ.
func isReplyRoute(m *wire.BasicPublish) bool {
	return m.Exchange == "" && strings.HasPrefix(m.RoutingKey, replyPrefix)
}

// newReplyKey draws a reply consumer's key.
func newReplyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// consumeReplies is basic.consume from amq.rabbitmq.reply-to, with
// RabbitMQ's refusals in RabbitMQ's order: a consumer tag the channel
// uses (530), a consumer that would acknowledge (406), a second reply
// consumer on the channel (406). Nothing goes to the log.
func (ch *channel) consumeReplies(m *wire.BasicConsume) *wire.Error {
	tag := m.ConsumerTag
	if tag == "" {
		tag = randomName("amq.ctag-")
	}
	addr := replyAddr{key: newReplyKey(), channel: ch.id, conn: ch.c.id, node: ch.c.srv.node().NodeID()}
	name := addr.name()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	switch {
	case ch.led.tagInUse(tag):
		return wire.ConnError(replycode.NotAllowed, m.ClassID(), m.MethodID(), "attempt to reuse consumer tag '%s'", tag)
	case !m.NoAck:
		return wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(), "reply consumer cannot acknowledge")
	case ch.led.replyName() != "":
		return wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(), "reply consumer already set")
	case len(name) > maxShortString:
		// A node id of more than about 180 bytes leaves no room for the
		// rest of the name in a short string.
		return wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(),
			"direct reply-to needs a shorter node id than '%s'", addr.node)
	}
	ch.led.setReply(&replyConsumer{tag: tag, name: name, key: addr.key})
	// Under mu: no reply can be written before consume-ok.
	if !m.NoWait {
		ch.c.send(ch.id, &wire.BasicConsumeOk{ConsumerTag: tag})
	}
	return nil
}

// cancelReplies is basic.cancel of the channel's reply consumer; false when
// tag names another consumer. Replies to its name are dropped from now on.
func (ch *channel) cancelReplies(m *wire.BasicCancel) bool {
	ch.mu.Lock()
	ok := ch.led.cancelReply(m.ConsumerTag)
	ch.mu.Unlock()
	if ok && !m.NoWait {
		ch.c.send(ch.id, &wire.BasicCancelOk{ConsumerTag: m.ConsumerTag})
	}
	return ok
}

// rewriteReplyTo gives a request published with reply_to
// amq.rabbitmq.reply-to the name of the channel's reply consumer, or
// refuses it as RabbitMQ does when the channel has none.
func (ch *channel) rewriteReplyTo(it *item) *wire.Error {
	if it.props == nil || it.props.Flags&wire.FlagReplyTo == 0 || it.props.ReplyTo != replyQueue {
		return nil
	}
	ch.mu.Lock()
	name := ch.led.replyName()
	ch.mu.Unlock()
	if name == "" {
		return wire.ChanError(replycode.PreconditionFailed, it.m.ClassID(), it.m.MethodID(), "fast reply consumer does not exist")
	}
	p := *it.props
	p.ReplyTo = name
	it.props = &p
	return nil
}

// declareReplies is queue.declare of a name that starts with
// amq.rabbitmq.reply-to, passive or not (nothing can create one): the
// pseudo-queue itself and the name of a live reply consumer exist, with no
// message and one consumer; any other name is not found. Like RabbitMQ, no
// permission is needed and CR and LF are dropped from the name.
func (ch *channel) declareReplies(m *wire.QueueDeclare) *wire.Error {
	name := strings.NewReplacer("\r", "", "\n", "").Replace(m.Queue)
	exists := name == replyQueue
	if !exists && strings.HasPrefix(name, replyPrefix) {
		exists = ch.c.srv.sendReply(ch.c.ctx, &proto.DirectReply{Name: name, Probe: true})
	}
	if !exists {
		return wire.ChanError(replycode.NotFound, m.ClassID(), m.MethodID(), "no queue '%s' in vhost '%s'", name, ch.vhost())
	}
	ch.lastQueue = name
	if !m.NoWait {
		ch.c.send(ch.id, &wire.QueueDeclareOk{Queue: name, MessageCount: 0, ConsumerCount: 1})
	}
	return nil
}

// publishReply carries one publish to a reply-to name (p is its log
// command, checked and converted like any publish) to the requester's
// channel, wherever it is, and answers the publisher. A reply whose
// channel, connection or node is gone, or whose name is no reply
// consumer's, is dropped. As in RabbitMQ 3.x, the name is no queue: a
// mandatory reply is returned (312 NO_ROUTE) whether or not it reached
// its consumer, and the confirm is an ack either way.
func (ch *channel) publishReply(it item, p *proto.Publish) {
	ch.sendReply(it, p)
	if ch.confirm {
		ch.publishSeq++
		ch.c.send(ch.id, &wire.BasicAck{DeliveryTag: ch.publishSeq})
	}
}

// sendReply delivers a reply and returns it when it was mandatory.
func (ch *channel) sendReply(it item, p *proto.Publish) {
	delivered := ch.c.srv.sendReply(ch.c.ctx, &proto.DirectReply{Name: p.GetRoutingKey(), Properties: p.GetProperties(), Body: p.GetBody()})
	if !delivered {
		ch.c.logger().Debug("direct reply dropped: no such reply consumer", "channel", ch.id, "name", p.GetRoutingKey())
	}
	// A delivered reply is returned all the same when mandatory (it went
	// to no queue), but one that is not mandatory was not dropped.
	ch.returnUnroutable(it, &proto.Result{Routed: delivered && !it.m.(*wire.BasicPublish).Mandatory}, ch.c.srv.epoch())
}

// takeReply writes a reply for the channel's reply consumer when key is
// its key (with probe, only reports whether it is). Any goroutine may
// call it: the worker of a responder on this node, or the internal
// service for one on another.
func (ch *channel) takeReply(key string, r *proto.DirectReply) bool {
	if ch.closing.Load() || ch.c.closing.Load() {
		return false
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	tag, ok := ch.led.replyConsumer(key)
	if !ok || r.GetProbe() {
		return ok
	}
	props := propertiesFromProto(r.GetProperties())
	// Numbered and queued under mu, like deliveries: wire tags reach the
	// client in order.
	ch.c.sendContent(ch.id, &wire.BasicDeliver{
		ConsumerTag: tag,
		DeliveryTag: ch.led.replyTag(),
		RoutingKey:  r.GetName(),
	}, &props, r.GetBody())
	return true
}

// Replier is what a Broker also implements to carry direct replies to the
// channels of other nodes; without it, such replies are dropped.
type Replier interface {
	// Reply hands r to node, which delivers it to the channel its name
	// designates, and reports whether it reached the reply consumer (with
	// r.probe: whether the consumer exists).
	Reply(ctx context.Context, node string, r *proto.DirectReply) (bool, error)
}

// sendReply hands a reply (or a probe) to the channel its name designates,
// on this node or another, and reports whether it reached its consumer.
func (s *Server) sendReply(ctx context.Context, r *proto.DirectReply) bool {
	a, ok := parseReplyName(r.GetName())
	b := s.node()
	if !ok || b == nil {
		return false
	}
	if a.node == b.NodeID() {
		return s.DirectReply(r)
	}
	rp, ok := b.(Replier)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, replyTimeout)
	defer cancel()
	delivered, err := rp.Reply(ctx, a.node, r)
	if err != nil {
		s.log.Debug("direct reply not delivered", "node", a.node, "err", err)
		return false
	}
	return delivered
}

// DirectReply delivers a reply to the reply consumer of one of this node's
// channels (with r.probe, only reports whether it exists); false when the
// name designates no live reply consumer here. The cluster calls it for
// replies published on other nodes; it never blocks.
func (s *Server) DirectReply(r *proto.DirectReply) bool {
	a, ok := parseReplyName(r.GetName())
	if !ok {
		return false
	}
	ch := s.channelOf(&proto.ChannelRef{Node: a.node, Connection: a.conn, Channel: uint32(a.channel)})
	if ch == nil {
		return false
	}
	return ch.takeReply(a.key, r)
}

// sameKey compares keys in constant time: how long a refusal takes says
// nothing about how much of a forged key was right.
func sameKey(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
