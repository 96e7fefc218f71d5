package amqp

import (
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/ttl"
)

// Consumer look-ahead and delivery tags.
//
// The log assigns deliveries to a consumer while it has credit, and an ack
// returns credit only once it has committed and been applied here. With
// credit equal to the prefetch, a consumer on a busy cluster spends most of
// its time waiting for that round trip. So a consumer with a prefetch of
// at least minLookaheadPrefetch gets a credit of prefetch × (1 + the
// server's ConsumerLookahead): the log may assign that many, and this node
// writes at most prefetch of them to the client, holding the rest and
// writing one as each ack arrives, before the ack reaches the log.
//
// Held deliveries are written later than deliveries of the channel's other
// consumers that the log assigned after them, so the tags a client sees
// cannot be the log's: a multiple ack would cover tags it never saw. The
// channel numbers what it writes itself (1, 2, 3, ... in write order, as
// AMQP requires) and translates each acknowledgement into the log's tags,
// sent as an explicit list.

// minLookaheadPrefetch is the least prefetch that gets look-ahead: a small
// prefetch (1 is the classic fair-dispatch setting) asks for messages to
// stay in the queue for whichever consumer is free first.
const minLookaheadPrefetch = 10

// maxLookahead bounds the deliveries one consumer's node holds.
const maxLookahead = 2000

// consumerCredit is the credit the log gives a consumer with this prefetch.
func consumerCredit(prefetch uint32, noAck bool, factor int) uint32 {
	if noAck || factor <= 0 || prefetch < minLookaheadPrefetch {
		return prefetch
	}
	extra := min(uint64(prefetch)*uint64(factor), maxLookahead)
	return prefetch + uint32(extra)
}

// written is a delivery the client holds: its tags and consumer.
type written struct {
	wire, logTag uint64
	consumer     string
}

// window is the client-side limit of a consumer with look-ahead.
type window struct {
	prefetch uint32
	inflight uint32          // written and not yet acknowledged
	held     []*fsm.Delivery // assigned by the log, not yet written
}

// recordWritten numbers a delivery for the wire. Locks: ch.mu held.
func (ch *channel) recordWritten(logTag uint64, consumer string, noAck bool) uint64 {
	ch.wireTag++
	if !noAck {
		if ch.written == nil {
			ch.written = map[uint64]written{}
		}
		ch.written[ch.wireTag] = written{wire: ch.wireTag, logTag: logTag, consumer: consumer}
		ch.order = append(ch.order, ch.wireTag)
		if w := ch.windows[consumer]; w != nil {
			w.inflight++
		}
	}
	return ch.wireTag
}

// offer writes d if its consumer has room, else holds it. Locks: ch.mu.
func (ch *channel) offer(d *fsm.Delivery) {
	if w := ch.windows[d.Consumer.GetTag()]; w != nil && (w.inflight >= w.prefetch || len(w.held) > 0) {
		w.held = append(w.held, d)
		ch.armHeld(d.Deadline)
		return
	}
	ch.writeDelivery(d)
}

// expiredAt reports whether a held delivery's message is past its deadline:
// the client never saw it, so it is still the queue's and dies on time.
func expiredAt(d *fsm.Delivery, nowMs int64) bool {
	return hasDeadline(d) && d.Deadline <= nowMs
}

// refill writes held deliveries of w while its client has room; the ones
// past their deadline are withheld for requeueing. Locks: ch.mu.
func (ch *channel) refill(w *window, now int64) {
	for len(w.held) > 0 && w.inflight < w.prefetch {
		d := w.held[0]
		w.held[0] = nil
		w.held = w.held[1:]
		if expiredAt(d, now) {
			ch.withhold(d.DeliveryTag)
			continue
		}
		ch.writeDelivery(d)
	}
	if len(w.held) == 0 {
		w.held = nil
	}
}

// armHeld makes sure expireHeld runs by deadline (unix ms), so a held
// message dies on time even when its consumer acks nothing. Locks: ch.mu.
func (ch *channel) armHeld(deadline int64) {
	if deadline == 0 || deadline == ttl.NoDeadline || (ch.heldDue != 0 && ch.heldDue <= deadline) {
		return
	}
	ch.heldDue = deadline
	wait := time.Until(time.UnixMilli(deadline))
	if ch.heldTimer == nil {
		ch.heldTimer = time.AfterFunc(wait, ch.expireHeld)
		return
	}
	ch.heldTimer.Reset(wait)
}

// expireHeld withholds every held delivery past its deadline, for an
// unseen requeue that lets the log kill it, and arms for the next one.
func (ch *channel) expireHeld() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	now := time.Now().UnixMilli()
	ch.heldDue = 0
	next := int64(0)
	for _, w := range ch.windows {
		keep := w.held[:0]
		for _, d := range w.held {
			if expiredAt(d, now) {
				ch.withhold(d.DeliveryTag)
				continue
			}
			keep = append(keep, d)
			if hasDeadline(d) && (next == 0 || d.Deadline < next) {
				next = d.Deadline
			}
		}
		clear(w.held[len(keep):])
		w.held = keep
	}
	if next != 0 {
		ch.armHeld(next)
	}
}

// acked takes wire tag (or every tag up to it, or everything written when
// multiple and tag 0) out of what the client holds and returns the log's
// tags. take=false only reads (a transaction settles at commit). An unknown
// tag is RabbitMQ's 406. Locks: ch.mu held.
func (ch *channel) acked(m wire.Method, tag uint64, multiple, take bool) ([]written, *wire.Error) {
	var out []written
	if !multiple {
		w, ok := ch.written[tag]
		if !ok {
			return nil, wire.ChanError(wire.PreconditionFailed, m.ClassID(), m.MethodID(), "unknown delivery tag %d", tag)
		}
		if take {
			delete(ch.written, tag)
		}
		return append(out, w), nil
	}
	if tag != 0 {
		if _, ok := ch.written[tag]; !ok {
			return nil, wire.ChanError(wire.PreconditionFailed, m.ClassID(), m.MethodID(), "unknown delivery tag %d", tag)
		}
	}
	n := 0
	for _, t := range ch.order {
		if tag != 0 && t > tag {
			break
		}
		n++
		if w, ok := ch.written[t]; ok {
			out = append(out, w)
			if take {
				delete(ch.written, t)
			}
		}
	}
	if take {
		ch.order = ch.order[n:]
	}
	return out, nil
}

// compactOrder drops acknowledged tags from the order once they dominate
// it (single acks leave them behind). Locks: ch.mu held.
func (ch *channel) compactOrder() {
	if len(ch.order) <= 64 || len(ch.order) <= 2*len(ch.written) {
		return
	}
	keep := ch.order[:0]
	for _, t := range ch.order {
		if _, ok := ch.written[t]; ok {
			keep = append(keep, t)
		}
	}
	ch.order = keep
}

// released returns credit to the windows of acknowledged deliveries and
// writes what they hold. Locks: ch.mu held.
func (ch *channel) released(ws []written, now int64) {
	var touched []*window
	for _, w := range ws {
		if win := ch.windows[w.consumer]; win != nil && win.inflight > 0 {
			win.inflight--
			touched = append(touched, win)
		}
	}
	for _, win := range touched {
		ch.refill(win, now)
	}
	ch.compactOrder()
}

// translateAck turns a client's basic.ack, basic.nack or basic.reject into
// the log command naming the log's tags; outside a transaction the client's
// credit comes back at once. It runs in the connection's reader, so it sees
// acknowledgements in the order the client sent them. The command is nil
// when the method names no delivery.
func (ch *channel) translateAck(m wire.Method, tx bool, now int64) (*proto.Command, []written, *wire.Error) {
	var tag uint64
	var multiple bool
	switch m := m.(type) {
	case *wire.BasicAck:
		tag, multiple = m.DeliveryTag, m.Multiple
	case *wire.BasicNack:
		tag, multiple = m.DeliveryTag, m.Multiple
	case *wire.BasicReject:
		tag = m.DeliveryTag
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ws, e := ch.acked(m, tag, multiple, !tx)
	if e != nil {
		return nil, nil, e
	}
	var pending []written
	if tx {
		pending = ws // taken at commit
	} else {
		ch.released(ws, now)
	}
	if len(ws) == 0 {
		// Only a multiple ack of tag 0 names nothing without an error:
		// with nothing outstanding it is a no-op in RabbitMQ, and a
		// command naming no delivery would read as tag 0 in the log.
		return nil, nil, nil
	}
	tags := make([]uint64, len(ws))
	for i, w := range ws {
		tags[i] = w.logTag
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i] < tags[j] })
	ref := ch.ref()
	switch m := m.(type) {
	case *wire.BasicNack:
		return settleTags(ref, tags, m.Requeue), pending, nil
	case *wire.BasicReject:
		return settleTags(ref, tags, m.Requeue), pending, nil
	}
	return &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{Channel: ref, Tags: tags}}}, pending, nil
}

func settleTags(ref *proto.ChannelRef, tags []uint64, requeue bool) *proto.Command {
	if requeue {
		return &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ref, Tags: tags}}}
	}
	return &proto.Command{Cmd: &proto.Command_Discard{Discard: &proto.Discard{Channel: ref, Tags: tags}}}
}

// committedAcks settles, after tx.commit, the acknowledgements the
// transaction carried: they leave what the client holds and return credit.
func (ch *channel) committedAcks(items []item, now int64) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var ws []written
	for _, it := range items {
		for _, w := range it.pending {
			// Gone already when the transaction acked it twice.
			if _, ok := ch.written[w.wire]; ok {
				delete(ch.written, w.wire)
				ws = append(ws, w)
			}
		}
	}
	ch.released(ws, now)
}

// recoverTags takes everything the channel was assigned and has not
// settled, written or held, for basic.recover to requeue by name: a
// delivery assigned after this point is a new one and stays. Locks: none.
func (ch *channel) recoverTags() []uint64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var tags []uint64
	for _, w := range ch.written {
		tags = append(tags, w.logTag)
	}
	for _, w := range ch.windows {
		tags = w.takeHeld(tags)
		w.inflight = 0
	}
	ch.written, ch.order = nil, nil
	sort.Slice(tags, func(i, j int) bool { return tags[i] < tags[j] })
	return tags
}

// heldRequeue takes every delivery the channel's windows hold and returns
// the unseen requeue that gives them back (nil when none), and before it
// the cancels of the channel's consumers. A closing channel sends them
// before its ChannelClosed, which would requeue the held deliveries
// flagged redelivered. The cancels come first because the requeue
// returns the consumers' credit: while they are registered, the log hands
// the messages straight back to them, and the ChannelClosed that follows
// requeues them as seen. Locks: none.
func (ch *channel) heldRequeue() (cancels []*proto.Command, requeue *proto.Command) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var tags []uint64
	for _, w := range ch.windows {
		tags = w.takeHeld(tags)
	}
	if len(tags) == 0 {
		return nil, nil
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i] < tags[j] })
	ref := ch.ref()
	for _, tag := range slices.Sorted(maps.Keys(ch.consumers)) {
		cancels = append(cancels, &proto.Command{Cmd: &proto.Command_Cancel{Cancel: &proto.Cancel{
			Consumer: &proto.ConsumerRef{Channel: ref, Tag: tag},
		}}})
	}
	requeue = settleTags(ref, tags, true)
	requeue.GetRequeue().Unseen = true
	return cancels, requeue
}

// dropWindow removes consumer's window and returns the log tags of what it
// held, for an unseen requeue. Locks: ch.mu held.
func (ch *channel) dropWindow(consumer string) []uint64 {
	w := ch.windows[consumer]
	if w == nil {
		return nil
	}
	delete(ch.windows, consumer)
	return w.takeHeld(nil)
}

// takeHeld empties w's held deliveries, appending their log tags to tags.
func (w *window) takeHeld(tags []uint64) []uint64 {
	for _, d := range w.held {
		tags = append(tags, d.DeliveryTag)
	}
	w.held = nil
	return tags
}
