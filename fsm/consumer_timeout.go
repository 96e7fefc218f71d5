package fsm

import (
	"math"
	"strconv"

	"github.com/raftmq/raftmq/proto"
)

// Consumer timeout (protocol level 4): a channel whose oldest
// unacknowledged delivery has waited at least its queue's timeout is
// closed with 406, as RabbitMQ 3.12 to 4.2 close it, and its deliveries
// go back to their queues. From level 10 (levelConsumerCancel) only the
// consumer of that delivery goes, with its deliveries, as RabbitMQ 4.3
// does it; the channel and its other consumers go on. The leader
// proposes ConsumerTimeout when the state says one falls due
// (DueConsumerTimeouts); apply decides on the log clock, so a stale or
// early command changes nothing.

// DefaultConsumerTimeout is RabbitMQ's default consumer_timeout (30
// minutes), in ms.
const DefaultConsumerTimeout = 1800000

// consumerTimeoutArg is the queue argument; consumer-timeout is the
// policy key.
const consumerTimeoutArg = "x-consumer-timeout"

// consumerTimeout is the timeout (ms) of q's deliveries: the smaller of
// the queue's x-consumer-timeout and its policy's consumer-timeout, as
// RabbitMQ takes them, else def; false for none (def <= 0). A deleted
// queue's deliveries take def: a replica restored from a snapshot knows
// such a queue by name only.
func (q *queueState) consumerTimeout(def int64) (int64, bool) {
	t, set := int64(0), false
	if !q.deleted {
		if v, ok := tableGet(q.args, consumerTimeoutArg); ok {
			// A queue declared below level 4 may carry a value now refused:
			// it is ignored, on every replica alike.
			if n, ok := valueAny(v).(int64); ok && n >= 0 {
				t, set = n, true
			}
		}
		if d := q.policy.definition(); d != nil && d.ConsumerTimeout != nil && d.GetConsumerTimeout() >= 0 {
			if n := d.GetConsumerTimeout(); !set || n < t {
				t, set = n, true
			}
		}
	}
	if set {
		return t, true
	}
	return def, def > 0
}

// checkConsumerTimeoutArg refuses an x-consumer-timeout that is not a
// non-negative integer, as RabbitMQ does.
func checkConsumerTimeoutArg(q *queueState) *proto.Result {
	return checkIntArg(q, consumerTimeoutArg, false)
}

// checkIntArg refuses q's argument key when it is not a non-negative
// integer (with positive, a positive one), in RabbitMQ's words
// (check_non_neg_int_arg).
func checkIntArg(q *queueState, key string, positive bool) *proto.Result {
	v, ok := tableGet(q.args, key)
	if !ok {
		return nil
	}
	n, ok := valueAny(v).(int64)
	switch {
	case !ok:
		return invalidArg(key, q, notInteger(v))
	case n < 0:
		return invalidArg(key, q, "{value_negative,"+strconv.FormatInt(n, 10)+"}")
	case n == 0 && positive:
		return invalidArg(key, q, "{value_zero,0}")
	}
	return nil
}

// timeoutDue is when ch's oldest unacknowledged delivery times out, and
// the timeout used. Like RabbitMQ, only the oldest is looked at. A
// delivery its node held beyond the prefetch reached the client no
// earlier than the channel's latest settlement.
func (ch *channel) timeoutDue(def int64) (due, timeout int64, ok bool) {
	if len(ch.unacked) == 0 {
		return 0, 0, false
	}
	p := ch.unacked[0]
	timeout, ok = p.q.consumerTimeout(def)
	if !ok {
		return 0, 0, false
	}
	start := p.at
	if p.held {
		start = max(start, ch.settled)
	}
	if timeout > math.MaxInt64-start {
		return math.MaxInt64, timeout, true
	}
	return start + timeout, timeout, true
}

func (s *state) nextConsumerTimeout(def int64) (int64, bool) {
	if !s.atLeast(levelConsumerTimeout) {
		return 0, false
	}
	best, found := int64(0), false
	for _, ch := range s.channels {
		if d, _, ok := ch.timeoutDue(def); ok && (!found || d < best) {
			best, found = d, true
		}
	}
	return best, found
}

func (s *state) dueConsumerTimeouts(now, def int64) []*proto.ChannelRef {
	if !s.atLeast(levelConsumerTimeout) {
		return nil
	}
	var out []*proto.ChannelRef
	for _, k := range sortedKeys(s.channels) {
		if d, _, ok := s.channels[k].timeoutDue(def); ok && d <= now {
			out = append(out, s.channels[k].ref)
		}
	}
	return out
}

// applyConsumerTimeout acts when the channel's oldest delivery is due at
// the log clock. Below level 10 it closes the channel: its consumers go,
// its deliveries are requeued (each counts as a return, as on any channel
// close), and the node owning it closes it with RabbitMQ's 406. From
// level 10 a delivery of a consumer takes only that consumer away
// (timeOutConsumer), and the channel's next oldest delivery is looked at
// in turn. One of basic.get, or of a consumer cancelled already (by its
// client or its queue's deletion), has no consumer to cancel: it closes
// the channel as before, as RabbitMQ 4.3 does. The two cannot be told
// apart anyway: a snapshot keeps the consumer of live consumers'
// deliveries only. Below level 4 deliveries carry no assignment time, so
// it changes nothing.
func (s *state) applyConsumerTimeout(c *proto.ConsumerTimeout) *proto.Result {
	if !s.atLeast(levelConsumerTimeout) {
		return &proto.Result{}
	}
	ch, ok := s.channels[chanKey(c.GetChannel())]
	if !ok {
		return &proto.Result{}
	}
	for {
		due, timeout, ok := ch.timeoutDue(c.GetDefaultMs())
		if !ok || due > s.clock {
			return &proto.Result{}
		}
		if p := ch.unacked[0]; p.c != nil && !p.c.gone && s.atLeast(levelConsumerCancel) {
			s.timeOutConsumer(ch, p.c, timeout)
			continue
		}
		s.sink.ChannelTimedOut(ch.ref, timeout)
		s.closeChannel(ch, false, returnSeen)
		return &proto.Result{}
	}
}

// timeOutConsumer removes c and returns every delivery of c still
// unacknowledged, as RabbitMQ 4.3 does on a consumer timeout: a return
// that is not a failed attempt (returnSeen), flagged redelivered. The
// node owning the channel is told first (ConsumerTimedOut) with the log
// tags returned: it sends basic.cancel, or closes the channel for a
// client without consumer_cancel_notify, and ignores late acks of those
// tags.
func (s *state) timeOutConsumer(ch *channel, c *consumer, timeout int64) {
	var ps []*unacked
	var tags []uint64
	keep := ch.unacked[:0]
	for _, p := range ch.unacked {
		if p.c == c {
			ps = append(ps, p)
			tags = append(tags, p.tag)
			continue
		}
		keep = append(keep, p)
	}
	clear(ch.unacked[len(keep):])
	ch.unacked = keep
	s.sink.ConsumerTimedOut(c.ref, timeout, tags)
	s.removeConsumer(c)
	s.requeue(ps, returnSeen)
	// After the requeue, as on a close: a single active consumer taking
	// over gets the returned messages first, in their order.
	s.activateNext(c.q)
}

// startConsumerTimeouts starts the timeout of every delivery that is
// unacknowledged as the level reaches 4 at the log clock: they were
// assigned when no time was recorded.
func (s *state) startConsumerTimeouts() {
	for _, ch := range s.channels {
		for _, p := range ch.unacked {
			p.at = s.clock
		}
	}
}
