package amqp

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/ttl"
)

// ledger is a channel's delivery bookkeeping: the consumers it serves, the
// wire tags it numbered and what they stand for in the logs (each
// delivery's group and that log's tag, logRef), what it wrote
// to the client and what it holds back (look-ahead, window.go), and what
// it withheld for an unseen requeue.
//
// Like the state machine (fsm), it is pure: it reads no clock (every
// method that needs the time takes now, unix ms), does no I/O, starts no
// goroutine and iterates no map in an order that leaks. Its methods
// return what is to be done (actions: deliveries to write with their wire
// tags, a deadline to arm a timer for, withheld tags waiting for the
// worker) or the log tags a command must name, and the channel carries
// that out. The channel is its single owner: every call holds ch.mu, and
// the writes a call returns are queued (outQueue.append never blocks)
// before ch.mu is released, so wire tags reach the client in the order
// they were numbered whichever goroutine (the reader on an ack, the apply
// path on a delivery, the held timer, the worker) made the call.
type ledger struct {
	// consumers are the channel's consumers the log registered; starting
	// the ones whose consume-ok is not written yet, with the deliveries
	// that wait for it.
	consumers map[string]bool
	starting  map[string][]*fsm.Delivery
	// clientCancelled are the consumers the client cancelled (the log
	// committed the Cancel); a tag leaves it when a consumer of that tag
	// starts again.
	clientCancelled map[string]bool
	// windows of the consumers with look-ahead.
	windows map[string]*window
	// prefetches are the prefetches of the consumers that acknowledge,
	// as the log holds them (a basic.qos changes them: setPrefetch).
	prefetches map[string]uint32
	// wireTag is the last wire tag handed out; written holds the
	// deliveries the client has and has not acknowledged, by wire tag,
	// and order their wire tags ascending (some acknowledged already).
	wireTag uint64
	written map[uint64]written
	order   []uint64
	// overdue holds the log tags of deliveries withheld (never written:
	// they arrived past their deadline, died while held, or their
	// consumer went while held), for the worker's unseen requeue.
	overdue []logRef
	// heldDue is the deadline (unix ms) the held timer is armed for, 0
	// when it is not armed.
	heldDue int64
	// reclaimed are the wire tags of deliveries a consumer timeout took
	// back (the log requeued them): the client's late ack, nack or reject
	// of one is ignored, as RabbitMQ 4.3 ignores it. reclaimedLog holds
	// their log tags, for an ack already on its way to the log.
	reclaimed    map[uint64]bool
	reclaimedLog map[logRef]bool
	// groups is the group of the log that last assigned a delivery to each
	// consumer: a consumer timeout names its log's tags without the group.
	groups map[string]uint32
	// closed is set once the channel handed everything to its close.
	closed bool
	// tuneAt is when a consumer's credit may next be due for tuning
	// (credit.go); 0 until the first ack.
	tuneAt int64
	// reply is the channel's direct reply-to consumer (replyto.go), nil
	// when it has none; the log knows nothing of it.
	reply *replyConsumer
}

// actions are what a ledger call asks the channel to do, in this order
// and before it releases the ledger.
type actions struct {
	// writes are deliveries to write, numbered for the wire.
	writes []numbered
	// arm asks for the held timer to fire at this deadline (unix ms) and
	// call expire; 0 leaves the timer as it is.
	arm int64
	// requeue says withheld log tags wait in overdue: wake the worker.
	requeue bool
	// tune are consumers whose credit is to be reconsidered (credit.go).
	tune []creditAsk
}

// numbered is a delivery to write and its wire tag.
type numbered struct {
	d    *fsm.Delivery
	wire uint64
}

// closeout is what a closing channel's ledger gives back.
type closeout struct {
	// cancels are the consumers to cancel before the unseen requeue, when
	// there is one (channel.heldRequeue says why).
	cancels []string
	// unseen are the log tags the channel held and never wrote: they go
	// back without the redelivered flag.
	unseen []logRef
	// redelivered are the log tags the client held: the channel's close
	// (ChannelClosed, ConnectionClosed, or a NodeDown of this node)
	// requeues them flagged redelivered; the channel names them nowhere.
	redelivered []logRef
}

func newLedger() *ledger {
	return &ledger{
		consumers:  map[string]bool{},
		starting:   map[string][]*fsm.Delivery{},
		windows:    map[string]*window{},
		prefetches: map[string]uint32{},
		groups:     map[string]uint32{},
	}
}

// deliver takes a delivery the log assigned to one of the channel's
// consumers: written, held, kept until consume-ok, or withheld when it
// came too late (overdueAt). A closed ledger drops it: the close in the
// log that ends the channel covers it.
func (l *ledger) deliver(d *fsm.Delivery, now int64) actions {
	var a actions
	if !l.closed && d.Consumer != nil {
		l.groups[d.Consumer.GetTag()] = d.Group
	}
	switch {
	case l.closed:
	case overdueAt(d, now):
		l.withhold(&a, refOf(d))
	default:
		tag := d.Consumer.GetTag()
		if pending, ok := l.starting[tag]; ok {
			l.starting[tag] = append(pending, d)
			break
		}
		if l.clientCancelled[tag] && !d.NoAck {
			// Its consumer was cancelled here, and the log assigned it
			// before it applied the Cancel (look-ahead beyond the
			// prefetch, on its way meanwhile): after cancel-ok the client
			// gets nothing more for the consumer, as from RabbitMQ. It
			// goes back unseen; a no-ack one was settled as it was
			// assigned and is written.
			l.withhold(&a, refOf(d))
			break
		}
		l.offer(&a, d)
	}
	return a
}

// startConsume registers consumer tag as starting, with a window when its
// credit is above its prefetch (look-ahead); false when the channel has a
// consumer of that tag.
func (l *ledger) startConsume(tag string, prefetch, credit uint32) bool {
	if l.consumers[tag] {
		return false
	}
	if _, ok := l.starting[tag]; ok {
		return false
	}
	l.starting[tag] = nil
	delete(l.clientCancelled, tag)
	if credit > prefetch {
		l.windows[tag] = &window{prefetch: prefetch, ctl: creditCtl{base: credit, credit: credit}}
	}
	return true
}

// consumed ends the start of consumer tag once the log answered its
// Consume (registered says whether it did). active reports whether the
// consumer is still there: the log may have cancelled it before
// consume-ok. The deliveries that waited are written (or held) after
// consume-ok.
func (l *ledger) consumed(tag string, registered bool) (active bool, a actions) {
	pending, starting := l.starting[tag]
	delete(l.starting, tag)
	if !registered {
		delete(l.windows, tag)
		delete(l.prefetches, tag)
		return false, a
	}
	if !starting || l.closed {
		return false, a
	}
	l.consumers[tag] = true
	l.tuneAt = 0 // its window's first period starts at the next ack
	for _, d := range pending {
		l.offer(&a, d)
	}
	return true, a
}

// cancelled forgets a consumer the log cancelled (its queue went); known
// reports whether it was the channel's. What the channel held for it is
// withheld for an unseen requeue.
func (l *ledger) cancelled(tag string) (known bool, a actions) {
	_, active := l.consumers[tag]
	_, starting := l.starting[tag]
	if l.closed || (!active && !starting) {
		return false, a
	}
	delete(l.consumers, tag)
	delete(l.starting, tag)
	delete(l.groups, tag)
	delete(l.prefetches, tag)
	for _, t := range l.dropWindow(tag) {
		l.withhold(&a, t)
	}
	return true, a
}

// timedOut forgets a consumer whose delivery timed out: the log removed
// it and requeued its deliveries, logTags, which are tags of the log of
// the consumer's queue: the group that assigned its deliveries here.
// known reports whether it was
// the channel's with its consume-ok written; one still starting is told
// after its consume-ok, as any consumer the log cancelled by then
// (consumed reports it inactive). Nothing goes back unseen: the log took
// back what the channel held or withheld for it too.
func (l *ledger) timedOut(tag string, logTags []uint64) (known bool) {
	if l.closed {
		return false
	}
	group := l.groupOf(tag)
	_, active := l.consumers[tag]
	delete(l.consumers, tag)
	delete(l.starting, tag)
	delete(l.windows, tag)
	delete(l.groups, tag)
	delete(l.prefetches, tag)
	back := make(map[logRef]bool, len(logTags))
	for _, t := range logTags {
		back[logRef{group, t}] = true
	}
	if l.reclaimed == nil {
		l.reclaimed, l.reclaimedLog = map[uint64]bool{}, map[logRef]bool{}
	}
	for _, w := range l.order {
		if x, ok := l.written[w]; ok && back[x.log] {
			delete(l.written, w)
			l.reclaimed[w] = true
		}
	}
	for t := range back {
		l.reclaimedLog[t] = true
	}
	l.overdue = slices.DeleteFunc(l.overdue, func(t logRef) bool { return back[t] })
	l.compactOrder()
	return active
}

// groupOf is the group of the log that assigned consumer tag's
// deliveries: the last delivery's, else that of a delivery the client
// still holds for it; 0 when the channel saw none.
func (l *ledger) groupOf(tag string) uint32 {
	if g, ok := l.groups[tag]; ok {
		return g
	}
	for _, w := range l.order {
		if x, ok := l.written[w]; ok && x.consumer == tag {
			return x.log.group
		}
	}
	return 0
}

// wasReclaimed reports whether a consumer timeout took back any of the
// log tags of group.
func (l *ledger) wasReclaimed(group uint32, logTags []uint64) bool {
	for _, t := range logTags {
		if l.reclaimedLog[logRef{group, t}] {
			return true
		}
	}
	return false
}

// cancelling stops writing what the ledger holds for consumer tag, as the
// reader reads the client's basic.cancel, before the log has the Cancel:
// a client tearing its consumer down rejects, requeueing, what it is sent
// meanwhile (pika does), and each reject freed a place the ledger filled
// from what it held, flagging and counting look-ahead deliveries by the
// hundred. What it holds goes back unseen with the cancel (or the close);
// what the log assigns meanwhile is held too. notCancelling undoes it
// when the Cancel fails.
func (l *ledger) cancelling(tag string) {
	if w := l.windows[tag]; w != nil {
		w.cancelling = true
	}
}

func (l *ledger) notCancelling(a *actions, tag string, now int64) {
	if w := l.windows[tag]; w != nil && w.cancelling {
		w.cancelling = false
		l.refill(a, w, now)
	}
}

// cancel forgets a consumer the client cancelled (the log committed the
// Cancel) and returns the log tags it held, for an unseen requeue. What it
// wrote stays the client's to acknowledge.
func (l *ledger) cancel(tag string) []logRef {
	delete(l.consumers, tag)
	delete(l.groups, tag)
	delete(l.prefetches, tag)
	if l.clientCancelled == nil {
		l.clientCancelled = map[string]bool{}
	}
	l.clientCancelled[tag] = true
	return l.dropWindow(tag)
}

// tagInUse reports whether tag names one of the channel's consumers of
// the log, registered or starting.
func (l *ledger) tagInUse(tag string) bool {
	_, starting := l.starting[tag]
	return l.consumers[tag] || starting
}

// setReply makes r the channel's reply consumer.
func (l *ledger) setReply(r *replyConsumer) { l.reply = r }

// cancelReply forgets the reply consumer when tag is its tag.
func (l *ledger) cancelReply(tag string) bool {
	if l.reply == nil || l.reply.tag != tag {
		return false
	}
	l.reply = nil
	return true
}

// replyName is the reply-to name of the channel's reply consumer, "" when
// it has none.
func (l *ledger) replyName() string {
	if l.reply == nil {
		return ""
	}
	return l.reply.name
}

// replyConsumer returns the tag of the reply consumer whose key is key;
// false when the channel has none with that key, or is closed.
func (l *ledger) replyConsumer(key string) (string, bool) {
	if l.closed || l.reply == nil || !sameKey(l.reply.key, key) {
		return "", false
	}
	return l.reply.tag, true
}

// replyTag numbers a direct reply for the wire. Replies are settled as
// they are written (no-ack), so nothing is remembered.
func (l *ledger) replyTag() uint64 {
	l.wireTag++
	return l.wireTag
}

// got numbers a message basic.get took from the log of group.
func (l *ledger) got(group uint32, logTag uint64, noAck bool) uint64 {
	return l.record(logRef{group, logTag}, "", noAck)
}

// ack takes a client's basic.ack, basic.nack or basic.reject and returns
// the log tags it names, by group and ascending (none for a multiple ack of tag 0 with
// nothing outstanding: a no-op, as in RabbitMQ). Outside a transaction the
// deliveries leave what the client holds at once and their consumers'
// windows write what they hold; in one (tx) they are only read, and
// pending is what commit takes. An unknown or already acknowledged tag is
// RabbitMQ's 406.
func (l *ledger) ack(m wire.Method, tx bool, now int64) (tags []logRef, pending []written, a actions, e *wire.Error) {
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
	ws, e := l.acked(m, tag, multiple, !tx)
	if e != nil {
		return nil, nil, a, e
	}
	if tx {
		pending = ws
	} else {
		l.released(&a, ws, now)
	}
	for _, w := range ws {
		tags = append(tags, w.log)
	}
	sortRefs(tags)
	return tags, pending, a, nil
}

// commit settles, once tx.commit went through the log, the
// acknowledgements a transaction read (ack with tx): they leave what the
// client holds and return credit.
func (l *ledger) commit(pending []written, now int64) actions {
	var a actions
	var ws []written
	for _, w := range pending {
		// Gone already when the transaction acked it twice.
		if _, ok := l.written[w.wire]; ok {
			delete(l.written, w.wire)
			ws = append(ws, w)
		}
	}
	l.released(&a, ws, now)
	return a
}

// recover takes everything the channel was assigned and has not settled,
// written or held, for basic.recover to requeue by name (by group and
// ascending): a delivery assigned after this point is a new one and stays.
func (l *ledger) recover() []logRef {
	var tags []logRef
	for _, w := range l.written {
		tags = append(tags, w.log)
	}
	for _, c := range slices.Sorted(maps.Keys(l.windows)) {
		w := l.windows[c]
		tags = w.takeHeld(tags)
		w.inflight = 0
	}
	l.written, l.order = nil, nil
	sortRefs(tags)
	return tags
}

// close hands everything over to the channel's close and closes the
// ledger: from now on deliveries are dropped (the close covers them) and
// the log's cancels are not the client's business. What was held, and
// what was withheld but not yet requeued by the worker (which may be gone
// already), goes back unseen.
func (l *ledger) close() closeout {
	out := closeout{unseen: l.takeOverdue()}
	for _, c := range slices.Sorted(maps.Keys(l.windows)) {
		out.unseen = l.windows[c].takeHeld(out.unseen)
		l.windows[c].inflight = 0
	}
	sortRefs(out.unseen)
	if len(out.unseen) > 0 {
		out.cancels = slices.Sorted(maps.Keys(l.consumers))
	}
	clear(l.consumers)
	for _, w := range l.written {
		out.redelivered = append(out.redelivered, w.log)
	}
	sortRefs(out.redelivered)
	l.written, l.order = nil, nil
	l.closed = true
	l.reply = nil
	l.reclaimed, l.reclaimedLog = nil, nil
	clear(l.groups)
	return out
}

// expire withholds every held delivery whose deadline is at or before
// now, for an unseen requeue that lets the log kill it, and arms the
// timer for the next deadline held. The held timer calls it.
func (l *ledger) expire(now int64) actions {
	var a actions
	l.heldDue = 0
	next := int64(0)
	for _, c := range slices.Sorted(maps.Keys(l.windows)) {
		w := l.windows[c]
		keep := w.held[:0]
		for _, d := range w.held {
			if expiredAt(d, now) {
				l.withhold(&a, refOf(d))
				continue
			}
			keep = append(keep, d)
			if hasDeadline(d) && (next == 0 || d.Deadline < next) {
				next = d.Deadline
			}
		}
		clear(w.held[len(keep):])
		w.held = keep
		if len(w.held) == 0 {
			w.held = nil
		}
	}
	l.armHeld(&a, next)
	return a
}

// takeBack forgets the delivery numbered wireTag for log tag t, which
// was never written (the writer found its message dead: guard), and
// withholds it for an unseen requeue; its consumer's window has room
// again. false when the ledger holds no such delivery (closed, or
// acknowledged).
func (l *ledger) takeBack(wireTag uint64, t logRef, now int64) (a actions, ok bool) {
	w, found := l.written[wireTag]
	if l.closed || !found || w.log != t {
		return a, false
	}
	delete(l.written, wireTag)
	l.withhold(&a, t)
	if win := l.windows[w.consumer]; win != nil && win.inflight > 0 {
		win.inflight--
		l.refill(&a, win, now)
	}
	l.compactOrder()
	return a, true
}

// takeOverdue returns the withheld log tags for the worker's unseen
// requeue and forgets them.
func (l *ledger) takeOverdue() []logRef {
	tags := l.overdue
	l.overdue = nil
	return tags
}

// requeueFailed puts back withheld tags whose requeue failed to commit,
// ahead of those withheld since: they are sent again.
func (l *ledger) requeueFailed(tags []logRef) {
	l.overdue = append(tags, l.overdue...)
}

// withhold queues a delivery the client never saw for an unseen requeue.
func (l *ledger) withhold(a *actions, t logRef) {
	l.overdue = append(l.overdue, t)
	a.requeue = true
}

// offer writes d if its consumer has room, else holds it.
func (l *ledger) offer(a *actions, d *fsm.Delivery) {
	w := l.windows[d.Consumer.GetTag()]
	if w != nil {
		w.ctl.assigned(d)
	}
	if w != nil && (w.full() || len(w.held) > 0 || w.cancelling) {
		w.held = append(w.held, d)
		l.armHeld(a, d.Deadline)
		return
	}
	a.writes = append(a.writes, numbered{d: d, wire: l.record(refOf(d), d.Consumer.GetTag(), d.NoAck)})
}

// record numbers a delivery for the wire; one to acknowledge is
// remembered, and counted in its consumer's window.
// holds reports whether the client holds log delivery t: written to it
// and not acknowledged. It walks what the client holds, for the rare
// basic.get whose outcome a leader change left unknown.
func (l *ledger) holds(t logRef) bool {
	for _, w := range l.written {
		if w.log == t {
			return true
		}
	}
	return false
}

func (l *ledger) record(t logRef, consumer string, noAck bool) uint64 {
	l.wireTag++
	if !noAck {
		if l.written == nil {
			l.written = map[uint64]written{}
		}
		l.written[l.wireTag] = written{wire: l.wireTag, log: t, consumer: consumer}
		l.order = append(l.order, l.wireTag)
		if w := l.windows[consumer]; w != nil {
			w.inflight++
		}
	}
	return l.wireTag
}

// refill writes held deliveries of w while its client has room; the ones
// past their deadline are withheld for requeueing.
func (l *ledger) refill(a *actions, w *window, now int64) {
	for len(w.held) > 0 && !w.full() && !w.cancelling {
		d := w.held[0]
		w.held[0] = nil
		w.held = w.held[1:]
		if expiredAt(d, now) {
			l.withhold(a, refOf(d))
			continue
		}
		a.writes = append(a.writes, numbered{d: d, wire: l.record(refOf(d), d.Consumer.GetTag(), d.NoAck)})
	}
	if !w.full() {
		// The client has room and nothing is held for it.
		w.ctl.starved = true
	}
	w.ctl.minHeld = min(w.ctl.minHeld, len(w.held))
	if len(w.held) == 0 {
		w.held = nil
	}
}

// armHeld asks for the held timer to fire by deadline (unix ms) unless it
// fires earlier already, so a held message dies on time even when its
// consumer acks nothing.
func (l *ledger) armHeld(a *actions, deadline int64) {
	if deadline == 0 || deadline == ttl.NoDeadline || (l.heldDue != 0 && l.heldDue <= deadline) {
		return
	}
	l.heldDue = deadline
	a.arm = deadline
}

// acked takes wire tag (or every tag up to it, or everything written when
// multiple and tag 0) out of what the client holds and returns those
// deliveries. take=false only reads (a transaction settles at commit). An
// unknown tag is RabbitMQ's 406.
func (l *ledger) acked(m wire.Method, tag uint64, multiple, take bool) ([]written, *wire.Error) {
	var out []written
	if !multiple {
		w, ok := l.written[tag]
		if !ok && l.reclaimed[tag] {
			if take {
				delete(l.reclaimed, tag)
			}
			return nil, nil
		}
		if !ok {
			return nil, wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(), "unknown delivery tag %d", tag)
		}
		if take {
			delete(l.written, tag)
		}
		return append(out, w), nil
	}
	if tag != 0 {
		if _, ok := l.written[tag]; !ok && !l.reclaimed[tag] {
			return nil, wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(), "unknown delivery tag %d", tag)
		}
	}
	n := 0
	for _, t := range l.order {
		if tag != 0 && t > tag {
			break
		}
		n++
		if take {
			delete(l.reclaimed, t)
		}
		if w, ok := l.written[t]; ok {
			out = append(out, w)
			if take {
				delete(l.written, t)
			}
		}
	}
	if take {
		l.order = l.order[n:]
	}
	return out, nil
}

// released returns credit to the windows of acknowledged deliveries and
// writes what they hold.
func (l *ledger) released(a *actions, ws []written, now int64) {
	var touched []*window
	for _, w := range ws {
		if win := l.windows[w.consumer]; win != nil && win.inflight > 0 {
			win.inflight--
			touched = append(touched, win)
		}
	}
	for _, win := range touched {
		l.refill(a, win, now)
	}
	l.compactOrder()
	l.tuneDue(a, now)
}

// compactOrder drops acknowledged tags from the order once they dominate
// it (single acks leave them behind).
func (l *ledger) compactOrder() {
	if len(l.order) <= 64 || len(l.order) <= 2*len(l.written) {
		return
	}
	keep := l.order[:0]
	for _, t := range l.order {
		if _, ok := l.written[t]; ok {
			keep = append(keep, t)
		}
	}
	l.order = keep
}

// acking records the prefetch of consumer tag, which acknowledges what
// it is sent, once the log registered it.
func (l *ledger) acking(tag string, prefetch uint32) { l.prefetches[tag] = prefetch }

// prefetchChange is a consumer whose prefetch a basic.qos changed, with
// the credit the log is to give it.
type prefetchChange struct {
	consumer         string
	prefetch, credit uint32
}

// setPrefetch makes prefetch (0: no limit) the prefetch of each of the
// channel's consumers that acknowledge, as a basic.qos on a channel that
// consumes does (the log's share: prefetchChange). A consumer with
// look-ahead keeps it, at factor times the new prefetch, and its window
// writes what it holds up to the new prefetch; one without gets no
// look-ahead, as it had none at its Consume.
func (l *ledger) setPrefetch(a *actions, prefetch uint32, factor int, now int64) []prefetchChange {
	var out []prefetchChange
	for tag, old := range l.prefetches {
		if old == prefetch || !l.consumers[tag] {
			continue
		}
		l.prefetches[tag] = prefetch
		credit := prefetch
		if w := l.windows[tag]; w != nil {
			credit = consumerCredit(prefetch, false, factor)
			w.prefetch = prefetch
			w.ctl.base, w.ctl.credit = credit, credit
			l.refill(a, w, now)
		}
		out = append(out, prefetchChange{consumer: tag, prefetch: prefetch, credit: credit})
	}
	slices.SortFunc(out, func(x, y prefetchChange) int { return cmp.Compare(x.consumer, y.consumer) })
	return out
}

// dropWindow removes consumer's window and returns the log tags of what it
// held.
func (l *ledger) dropWindow(consumer string) []logRef {
	w := l.windows[consumer]
	if w == nil {
		return nil
	}
	delete(l.windows, consumer)
	return w.takeHeld(nil)
}

// overdueGrace is how far past its deadline, by this node's clock, a
// delivery may still be written. The deadline is in log time (the leader's
// clock): the grace absorbs a follower's ordinary apply lag and clock skew
// between nodes, so a message with TTL 0 handed to a consumer on a follower
// still reaches it.
const overdueGrace = 250 * time.Millisecond

// overdueAt reports whether d reached this node so long after its deadline
// (a node catching up on the log applies old assignments) that writing it
// would hand the client a message that is already dead. A no-ack delivery
// is settled already, so it is written whatever its age.
func overdueAt(d *fsm.Delivery, nowMs int64) bool {
	return hasDeadline(d) && pastGrace(d.Deadline, nowMs)
}

// pastGrace reports whether nowMs is more than overdueGrace past
// deadline: too late to write a delivery of a message dying then.
func pastGrace(deadline, nowMs int64) bool {
	return nowMs > deadline+overdueGrace.Milliseconds()
}

// hasDeadline reports whether d's message can still die: it has a deadline
// and the delivery is not settled already (no-ack).
func hasDeadline(d *fsm.Delivery) bool {
	return !d.NoAck && d.Deadline != 0 && d.Deadline != ttl.NoDeadline
}

// expiredAt reports whether a held delivery's message is past its deadline:
// the client never saw it, so it is still the queue's and dies on time.
func expiredAt(d *fsm.Delivery, nowMs int64) bool {
	return hasDeadline(d) && d.Deadline <= nowMs
}
