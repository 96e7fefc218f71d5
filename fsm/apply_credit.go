package fsm

import "github.com/raftmq/raftmq/proto"

// MaxCredit bounds the credit a Credit command may set: a consumer's
// largest prefetch (65,535, AMQP's short) and a look-ahead of up to 34,465
// beyond it, which its node holds (amqp/window.go bounds what it asks for
// lower).
const MaxCredit = 100_000

// applyCredit sets the credit of a consumer while it consumes (level 14).
//
// A consumer's credit is fixed by its Consume: prefetch times (1 + the
// node's look-ahead factor). An ack returns credit only once it has gone
// through the log, so a consumer takes at most credit per round trip of
// its acks, and under load that round trip is what a publish's commit
// takes: a fixed credit fell behind as publishers were added. The
// consumer's node measures what the consumer would take and asks for
// the credit that covers it. Only the amount the log assigns changes:
// the node still writes at most the prefetch to the client, and
// deliveries stay assigned and settled by the log as before.
//
// A consumer the channel does not have (cancelled, its channel closed,
// a command that arrives after the log removed it) is left alone, as is
// one without acks or prefetch (credit means nothing to it). A credit
// below the prefetch counts as the prefetch. A raised credit dispatches
// the queue at once; a lowered one takes nothing back, the consumer just
// gets nothing more until its unacked count is below the new credit.
// Below level 14 nothing changes: the kind did not exist.
//
// From level 25 a Credit may carry a prefetch, which becomes the
// consumer's first: a basic.qos on its channel. RabbitMQ applies a
// channel's new prefetch to the consumers started after it, but a worker
// that holds deliveries it cannot settle yet (Celery's tasks with an ETA)
// raises the prefetch of its running consumer to go on taking work, as
// the AMQP spec lets it: kept at its old prefetch such a worker takes no
// new task until the held ones come due. The queue is dispatched at
// once, since a larger prefetch (or none) may let the consumer take
// more; a smaller one takes nothing back.
func (s *state) applyCredit(c *proto.Credit) *proto.Result {
	if !s.atLeast(levelCredit) {
		return &proto.Result{}
	}
	ch, ok := s.channels[chanKey(c.GetConsumer().GetChannel())]
	if !ok {
		return &proto.Result{}
	}
	for _, x := range ch.consumers {
		if x.ref.GetTag() != c.GetConsumer().GetTag() {
			continue
		}
		if c.Prefetch != nil && s.atLeast(levelQos) && !x.noAck {
			x.prefetch = c.GetPrefetch()
			x.credit = 0
			if x.prefetch != 0 {
				x.credit = max(c.GetCredit(), x.prefetch)
			}
			s.dispatch(x.q, nil)
			break
		}
		if x.noAck || x.prefetch == 0 {
			break
		}
		credit := max(c.GetCredit(), x.prefetch)
		raised := credit > max(x.credit, x.prefetch)
		x.credit = credit
		if raised {
			s.dispatch(x.q, nil)
		}
		break
	}
	return &proto.Result{}
}

// ConsumerLoad is what the state holds of a consumer for its node's
// credit tuning (amqp/credit.go).
type ConsumerLoad struct {
	// Level is the log's protocol level: Credit changes nothing below
	// levelCredit.
	Level uint32
	// Credit is the consumer's credit (0: its prefetch) and Unacked what
	// it holds against it.
	Credit, Unacked uint32
	// Ready is how many ready messages its queue has: with the consumer
	// at its credit, the log keeps them for want of credit, and how fast
	// they pile up is how far its credit falls short.
	Ready uint64
}

// ConsumerLoad returns what the state holds of a consumer; false when the
// channel has no consumer of that tag.
func (m *Machine) ConsumerLoad(ref *proto.ConsumerRef) (ConsumerLoad, bool) {
	ch, ok := m.channels[chanKey(ref.GetChannel())]
	if !ok {
		return ConsumerLoad{}, false
	}
	for _, c := range ch.consumers {
		if c.ref.GetTag() == ref.GetTag() {
			return ConsumerLoad{Level: m.level, Credit: c.credit, Unacked: c.unacked, Ready: uint64(c.q.q.Len())}, true
		}
	}
	return ConsumerLoad{}, false
}
