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
}

type queueCounts struct {
	published, delivered, acked, redelivered uint64
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
func countAcks(ps []*pending) {
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
			out = append(out, QueueCounts{Vhost: v.name, Name: k, Published: c.published, Delivered: c.delivered, Acked: c.acked, Redelivered: c.redelivered})
		}
	}
	return out
}

// unackedSums are what a queue's deliveries not yet acknowledged add up to.
type unackedSums struct {
	bytes, persistent uint64
}

// unackedSums sums the bodies delivered and not yet acknowledged, and
// counts the persistent ones, by queue.
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
	}
	return out
}

// withUnacked fills what qi counts of the unacknowledged deliveries: their
// bytes, and the persistent ones among all of the queue's messages.
func (q *queueState) withUnacked(qi *proto.QueueInfo, unacked map[*queueState]unackedSums) *proto.QueueInfo {
	qi.UnackedBytes = unacked[q].bytes
	qi.MessagesPersistent += unacked[q].persistent
	return qi
}
