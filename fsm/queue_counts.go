package fsm

import (
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

// QueueCounts counts the messages that went through a queue, for the
// management API's per-queue message rates: copies routed to it,
// deliveries and basic.get results, acknowledgements (no-ack deliveries
// included, as Stats counts them) and redeliveries.
//
// Every replica applies the same commands, so they agree, but they are
// kept out of the snapshot (its format stays as it is) and out of
// QueueInfo (which a restored machine must reproduce): a node that
// restores a snapshot counts from 0 again. They are read as rates, where
// that costs one sample.
type QueueCounts struct {
	Vhost, Name                              string
	Published, Delivered, Acked, Redelivered uint64
	// DeadLettered counts the messages that died in the queue (TTL,
	// max-length, rejection, delivery limit) with a dead-letter exchange
	// set, from protocol level 5 on, as Stats.Deaths[i][1] counts them.
	DeadLettered uint64
}

type queueCounts struct {
	published, delivered, acked, redelivered, deadLettered uint64
}

// countDelivery counts a delivery or a basic.get result of q.
func (q *queueState) countDelivery(m *queue.Message, noAck bool) {
	q.counts.delivered++
	if m.Redelivered {
		q.counts.redelivered++
	}
	if noAck {
		q.counts.acked++
	}
}

// countAcks counts the acknowledgements of ps on their queues.
func countAcks(ps []*unacked) {
	for _, p := range ps {
		p.q.counts.acked++
	}
}

// QueueCounts returns the counters of every queue, sorted by vhost and
// name.
func (m *Machine) QueueCounts() []QueueCounts {
	var out []QueueCounts
	for _, v := range m.vhostsOf("") {
		for _, k := range sortedKeys(v.queues) {
			c := v.queues[k].counts
			out = append(out, QueueCounts{Vhost: v.name, Name: k, Published: c.published, Delivered: c.delivered, Acked: c.acked, Redelivered: c.redelivered,
				DeadLettered: c.deadLettered})
		}
	}
	return out
}

// unackedSums are what a queue's deliveries not yet acknowledged add up
// to, and the part of them that counts as ready.
type unackedSums struct {
	bytes, persistent uint64
	held, heldBytes   uint64
}

// Deliveries held by a consumer's node.
//
// A consumer with look-ahead (credit above its prefetch: amqp/window.go)
// may be assigned more deliveries than its prefetch; its node writes at
// most prefetch of them to the client and holds the rest until acks free
// room. What the client has not seen is, to an operator, still waiting in
// the queue: RabbitMQ shows a queue of 200 with one consumer of prefetch
// 30 as 170 ready and 30 unacknowledged. So every count shown outside
// (queue listings, declare-ok, basic.get-ok, totals) takes the deliveries
// of a live consumer beyond its prefetch as ready, not unacknowledged.
//
// Which ones the node holds is not in the log, but it writes in
// assignment order, so the held ones are the consumer's latest
// assignments: the consumer's unacked beyond its prefetch, counted from
// the end of its channel's list. Only the prefetch, the credit and the
// ascending list are read, all replicated state, so every replica shows
// the same numbers. A cancelled consumer's deliveries, which stay on its
// channel, are left out: a restored replica no longer knows whose they
// are (and the node hands back what it held right after the cancel).
// Nothing here is written back: this is a view, and the state, its digest
// and its snapshot are unchanged.

// heldCount is how many of c's deliveries count as held by its node.
func (c *consumer) heldCount() uint32 {
	if c == nil || c.gone || c.noAck || c.prefetch == 0 || c.credit <= c.prefetch || c.unacked <= c.prefetch {
		return 0
	}
	return c.unacked - c.prefetch
}

// eachHeld calls f with every delivery of ch that counts as held.
func (ch *channel) eachHeld(f func(*unacked)) {
	var seen map[*consumer]uint32
	for i := len(ch.unacked) - 1; i >= 0; i-- {
		p := ch.unacked[i]
		n := p.c.heldCount()
		if n == 0 {
			continue
		}
		if seen == nil {
			seen = map[*consumer]uint32{}
		}
		if seen[p.c] < n {
			seen[p.c]++
			f(p)
		}
	}
}

// held counts the deliveries of q that count as held, for the message
// counts of replies to q's clients.
func (q *queueState) held() uint32 {
	var n uint32
	for _, c := range q.consumers {
		n += c.heldCount()
	}
	return n
}

// unackedSums sums the bodies delivered and not yet acknowledged, counts
// the persistent ones, and those held, by queue.
func (m *Machine) unackedSums() map[*queueState]unackedSums {
	out := map[*queueState]unackedSums{}
	for _, ch := range m.channels {
		for _, p := range ch.unacked {
			u := out[p.q]
			u.bytes += uint64(p.m.Size())
			if p.m.Persistent {
				u.persistent++
			}
			out[p.q] = u
		}
		ch.eachHeld(func(p *unacked) {
			u := out[p.q]
			u.held++
			u.heldBytes += uint64(p.m.Size())
			out[p.q] = u
		})
	}
	return out
}

// withUnacked fills what qi counts of the unacknowledged deliveries: their
// bytes, the persistent ones among all of the queue's messages, and moves
// those held to ready.
func (q *queueState) withUnacked(qi *proto.QueueInfo, unacked map[*queueState]unackedSums) *proto.QueueInfo {
	u := unacked[q]
	qi.UnackedBytes = u.bytes - u.heldBytes
	qi.MessagesPersistent += u.persistent
	qi.Ready += u.held
	qi.Unacked -= u.held
	qi.ReadyBytes += u.heldBytes
	return qi
}
