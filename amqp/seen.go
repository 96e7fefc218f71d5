package amqp

import (
	"slices"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// A channel's close hands back what its client did not acknowledge. The
// log holds every delivery it assigned the channel, also those the node
// held back beyond the prefetch (look-ahead, window.go) and those still
// on their way to the node when the channel closed; the node alone knows
// which the client was sent. RabbitMQ flags redelivered, and counts in
// x-delivery-count, only what it sent; a close that flagged every
// assignment flagged hundreds of messages no consumer saw, and a
// delivery-limit could dead-letter them. So the close names what was
// sent (ChannelClosed.seen, ConnectionClosed.seen, from protocol level
// 22) and the log returns the rest unflagged.
//
// Sent is what the ledger wrote and the client did not acknowledge when
// it closed, and the acknowledgements that may not have reached the log:
// the client saw those too, and one that fails to commit (a socket that
// died cancels the connection's submissions) leaves the delivery with
// the channel, which must come back flagged.

// noteUnsettled records the deliveries the acknowledgements of items
// name as sent: the log may still hold them. Locks: none.
func (ch *channel) noteUnsettled(items []item) {
	var refs []logRef
	for _, it := range items {
		if it.cmd == nil {
			continue
		}
		for _, t := range ackTags(it.cmd) {
			refs = append(refs, logRef{it.group, t})
		}
		for _, w := range it.pending {
			refs = append(refs, w.log)
		}
	}
	ch.noteSeen(refs)
}

// noteSeen records deliveries the client was sent that the log may
// still hold for the channel, for its close to name. Locks: none.
func (ch *channel) noteSeen(refs []logRef) {
	if len(refs) == 0 {
		return
	}
	ch.mu.Lock()
	ch.unsettled = append(ch.unsettled, refs...)
	ch.mu.Unlock()
}

// seen is what the channel's client was sent and the log may still hold
// (see above), once the ledger closed and the worker ended. Locks: none.
func (ch *channel) seen() []*proto.SeenDeliveries {
	ch.mu.Lock()
	refs := append(slices.Clone(ch.sent), ch.unsettled...)
	ch.mu.Unlock()
	return seenRanges(ch.id, refs)
}

// seenRanges is refs as the ranges of channel's deliveries in each
// group's log.
func seenRanges(channel uint16, refs []logRef) []*proto.SeenDeliveries {
	sortRefs(refs)
	var out []*proto.SeenDeliveries
	for _, r := range refs {
		if len(out) == 0 || out[len(out)-1].Group != r.group {
			out = append(out, &proto.SeenDeliveries{Channel: uint32(channel), Group: r.group})
		}
		s := out[len(out)-1]
		if n := len(s.Ranges); n > 0 && r.tag <= s.Ranges[n-1]+1 {
			s.Ranges[n-1] = max(s.Ranges[n-1], r.tag)
			continue
		}
		s.Ranges = append(s.Ranges, r.tag, r.tag)
	}
	return out
}

// seenOf is what the clients of chans were sent, and whether it can be
// named: a worker still running (past the close's wait) may yet fail an
// acknowledgement, and so may not the log's bound on a command's lists;
// then the close names nothing and every delivery returns flagged, as
// RabbitMQ would flag everything it sent.
func seenOf(chans []*channel) (seen []*proto.SeenDeliveries, listed bool) {
	n := 0
	for _, ch := range chans {
		select {
		case <-ch.done:
		default:
			return nil, false
		}
		s := ch.seen()
		for _, e := range s {
			n += len(e.Ranges)
		}
		seen = append(seen, s...)
	}
	if n > fsm.MaxListLen {
		return nil, false
	}
	return seen, true
}
