package amqp

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// item is one complete inbound method, with its content when it has one.
type item struct {
	m     wire.Method
	props *wire.Properties
	body  []byte
	// cmd is the log command of an acknowledgement, translated to the
	// log's tags by the reader (window.go), for the log of group; in a
	// transaction, pending is what it takes from the client's deliveries
	// at commit.
	cmd     *proto.Command
	group   uint32
	pending []written
}

// maxBatch bounds how many queued publishes or acknowledgements one
// SubmitBatch carries.
const maxBatch = 256

// channel is one AMQP channel. The connection's reader assembles content
// and hands complete methods to the channel's worker goroutine (run), which
// processes them in order and may block on the broker without stalling the
// connection's other channels or its heartbeats.
type channel struct {
	c  *conn
	id uint16
	// self is the channel's name in commands (ref), made once.
	self atomic.Pointer[proto.ChannelRef]
	in   chan item
	quit chan struct{}
	done chan struct{}

	stopOnce sync.Once
	closing  atomic.Bool // channel.close sent, waiting for close-ok
	// txAsked is set by the reader at tx.select: acknowledgements read
	// after it wait for tx.commit to return credit.
	txAsked atomic.Bool

	// Reader only: content being assembled.
	content *item
	header  *wire.ContentHeader

	// mu makes the channel the single owner of its ledger (ledger.go):
	// the reader (acks), the apply path (deliveries, cancels), the held
	// timer and the worker (consume, cancel, get, recover, close) each
	// call it holding mu, and carry out the writes it returns before
	// releasing mu. Nothing that can wait is done under mu (frames are
	// queued, and outQueue.append never blocks): submissions to the log
	// wait until it is released.
	mu  sync.Mutex
	led *ledger
	// epochs are the silence epochs the channel's deliveries were
	// decided in, by group (silence.go). Guarded by mu.
	epochs map[uint32][]tagEpoch
	// sent is what the client held when the ledger closed, unsettled the
	// deliveries of acknowledgements that may not have reached the log:
	// what the close names as seen (seen.go). Guarded by mu.
	sent, unsettled []logRef
	// heldTimer calls expireHeld at the deadline the ledger asked for.
	heldTimer *time.Timer
	// overdueKick wakes the worker to requeue what the ledger withheld
	// and to raise a failed acknowledgement.
	overdueKick chan struct{}
	// acks sends the channel's acknowledgements to the log (acks.go).
	acks *ackSender

	// Worker only.
	prefetch       uint16 // basic.qos global=false
	prefetchGlobal uint16 // basic.qos global=true
	confirm        bool
	tx             bool   // tx.select: publishes and acks wait for tx.commit
	txItems        []item // the current transaction's publishes and acks
	publishSeq     uint64 // last publish sequence number in confirm mode
	lastQueue      string // the queue this channel declared last
	allowed        allowed
	// stateful is set once the channel submitted a Consume or a Get: only
	// then does the log hold consumers or unacknowledged deliveries of it.
	stateful bool
}

func newChannel(c *conn, id uint16) *channel {
	ch := &channel{
		c:           c,
		id:          id,
		in:          make(chan item, maxBatch),
		quit:        make(chan struct{}),
		done:        make(chan struct{}),
		led:         newLedger(),
		overdueKick: make(chan struct{}, 1),
	}
	ch.acks = newAckSender(ch.submitAcks, ch.kick)
	return ch
}

// ref names the channel in the commands it proposes. The name is the same
// for the channel's life and nothing changes a command once made, so its
// commands share one (a publish or an ack made one each before).
func (ch *channel) ref() *proto.ChannelRef {
	if r := ch.self.Load(); r != nil {
		return r
	}
	r := &proto.ChannelRef{Node: ch.c.srv.node().NodeID(), Connection: ch.c.id, Channel: uint32(ch.id)}
	ch.self.Store(r)
	return r
}

// stop ends the worker without telling the broker (the connection is gone
// and ConnectionClosed covers every channel).
func (ch *channel) stop() {
	ch.stopOnce.Do(func() {
		close(ch.quit)
		ch.mu.Lock()
		if ch.heldTimer != nil {
			ch.heldTimer.Stop()
		}
		ch.mu.Unlock()
	})
}

// fail closes the channel with a soft error: channel.close is sent and
// everything but channel.close and close-ok is ignored until close-ok.
func (ch *channel) fail(e *wire.Error) {
	if ch.closing.CompareAndSwap(false, true) {
		ch.c.logger().Info("closing channel", "channel", ch.id, "code", e.Code, "text", e.Text, "class", e.ClassID, "method", e.MethodID)
		ch.c.send(ch.id, e.Close())
	}
}

// push hands a complete method to the worker.
func (ch *channel) push(it item) {
	select {
	case ch.in <- it:
	case <-ch.done:
		ch.noteUnsettled([]item{it})
	case <-ch.quit:
		ch.noteUnsettled([]item{it})
	}
}

// handleFrame runs in the connection's reader: it assembles content and
// passes complete methods on. A returned error closes the channel (soft)
// or the connection (hard).
func (ch *channel) handleFrame(f wire.Frame) *wire.Error {
	if ch.closing.Load() {
		ch.content, ch.header = nil, nil
		if f.Type != wire.FrameMethod {
			return nil
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			e, _ := wire.AsError(err)
			return e
		}
		switch m.(type) {
		case *wire.ChannelClose:
			ch.push(item{m: m})
		case *wire.ChannelCloseOk:
			// The client may reuse the number right away: wait until the
			// broker recorded the close and the number is free, so a new
			// channel's commands follow the old one's ChannelClosed.
			ch.push(item{m: m})
			select {
			case <-ch.done:
			case <-ch.quit:
			}
		}
		return nil
	}
	switch f.Type {
	case wire.FrameMethod:
		if ch.content != nil {
			return wire.ConnError(replycode.UnexpectedFrame, ch.content.m.ClassID(), ch.content.m.MethodID(),
				"expected content header for class 60, got non content header frame instead")
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			e, _ := wire.AsError(err)
			return e
		}
		switch m := m.(type) {
		case *wire.ChannelOpen:
			return wire.ConnError(replycode.ChannelError, 20, 10, "second 'channel.open' seen")
		case *wire.BasicPublish:
			// While publishers are blocked (memory alarm) the reader of a
			// publishing connection stops here.
			ch.c.waitWhileBlocked()
			ch.content = &item{m: m}
			return nil
		}
		if m.HasContent() || m.ClassID() == wire.ClassConnection {
			return wire.ConnError(replycode.CommandInvalid, m.ClassID(), m.MethodID(), "%s is not allowed here", m.Name())
		}
		switch m := m.(type) {
		case *wire.TxSelect:
			ch.txAsked.Store(true)
		case *wire.BasicCancel:
			ch.mu.Lock()
			ch.led.cancelling(m.ConsumerTag)
			ch.mu.Unlock()
		case *wire.BasicAck, *wire.BasicNack, *wire.BasicReject:
			items, e := ch.translateAck(m, ch.txAsked.Load(), time.Now().UnixMilli())
			if e != nil {
				return e
			}
			for _, it := range items {
				ch.push(it)
			}
			return nil
		}
		ch.push(item{m: m})
	case wire.FrameHeader:
		if ch.content == nil || ch.header != nil {
			return wire.ConnError(replycode.UnexpectedFrame, 0, 0, "unexpected content header frame on channel %d", ch.id)
		}
		h, err := wire.DecodeContentHeader(f.Payload)
		if err != nil {
			e, _ := wire.AsError(err)
			return e
		}
		if max := uint64(ch.c.srv.cfg.MaxMessageSize); h.BodySize > max {
			ch.content = nil
			return wire.ChanError(replycode.PreconditionFailed, 60, 40, "message size %d is larger than configured max size %d", h.BodySize, max)
		}
		ch.header = h
		ch.content.props = &h.Properties
		if h.BodySize == 0 {
			ch.complete()
		}
	case wire.FrameBody:
		if ch.header == nil {
			return wire.ConnError(replycode.UnexpectedFrame, 0, 0, "unexpected content body frame on channel %d", ch.id)
		}
		if uint64(len(ch.content.body))+uint64(len(f.Payload)) > ch.header.BodySize {
			return wire.ConnError(replycode.FrameError, 60, 40, "content body is larger than the %d bytes its header announced", ch.header.BodySize)
		}
		switch {
		case ch.content.body == nil && uint64(len(f.Payload)) == ch.header.BodySize:
			// The whole body in one frame: the frame's payload is the
			// channel's (ReadFrame allocates each), no copy.
			ch.content.body = f.Payload
		case ch.content.body == nil:
			// Sized by what arrived, never by the untrusted announced size
			// alone.
			ch.content.body = make([]byte, 0, min(ch.header.BodySize, uint64(16*len(f.Payload))))
			fallthrough
		default:
			ch.content.body = append(ch.content.body, f.Payload...)
		}
		if uint64(len(ch.content.body)) == ch.header.BodySize {
			ch.complete()
		}
	}
	return nil
}

func (ch *channel) complete() {
	it := *ch.content
	if it.body == nil {
		it.body = []byte{}
	}
	ch.content, ch.header = nil, nil
	ch.push(it)
}

// run is the channel's worker.
func (ch *channel) run() {
	defer close(ch.done)
	// The acks handed to the log go before the channel ends (acks.go).
	defer ch.acks.end()
	batch := make([]item, 0, maxBatch)
	for {
		var it item
		select {
		case it = <-ch.in:
		case <-ch.overdueKick:
			ch.requeueOverdue()
			if e := ch.acks.failure(); e != nil {
				ch.raise(e)
			}
			continue
		case <-ch.quit:
			ch.finishQueued(batch)
			return
		}
		batch = ch.queued(append(batch[:0], it))
		// Withheld deliveries go back before the client's acks that
		// follow them: a multiple ack must not settle a tag it never saw.
		ch.requeueOverdue()
		if ch.process(batch) {
			return
		}
	}
}

// queued appends the methods queued now to batch, up to maxBatch.
func (ch *channel) queued(batch []item) []item {
	for len(batch) < maxBatch {
		select {
		case it := <-ch.in:
			batch = append(batch, it)
		default:
			return batch
		}
	}
	return batch
}

// finishQueued handles the methods still queued when the connection
// ends. The reader reads in order, so on a client's connection.close they
// are what the client sent before it, and RabbitMQ handles those before
// the close: a dropped ack was requeued by the close and delivered again,
// a dropped publish lost. When the socket died instead, the connection's
// context is cancelled and what they submit fails at once.
func (ch *channel) finishQueued(batch []item) {
	for {
		batch = ch.queued(batch[:0])
		if len(batch) == 0 {
			return
		}
		ch.requeueOverdue()
		if ch.process(batch) {
			return
		}
	}
}

// process handles a run of queued methods; it reports whether the channel
// ended.
func (ch *channel) process(batch []item) bool {
	for i := 0; i < len(batch); {
		it := batch[i]
		if ch.closing.Load() {
			switch it.m.(type) {
			case *wire.ChannelClose:
				// Both sides closed at once. Like RabbitMQ, answer the
				// client's close and keep waiting for the close-ok of
				// ours: the number stays taken until it arrives, so that
				// close-ok is not taken for a frame on a closed channel.
				ch.c.send(ch.id, &wire.ChannelCloseOk{})
			case *wire.ChannelCloseOk:
				ch.finish(false)
				return true
			case *wire.BasicAck, *wire.BasicNack, *wire.BasicReject:
				// Dropped, as RabbitMQ drops what comes before close-ok;
				// the reader took its deliveries from what the client
				// holds, and the close must name them as seen.
				ch.noteUnsettled(batch[i : i+1])
			}
			i++
			continue
		}
		// Runs of publishes and of acknowledgements go to the log together.
		j := i + 1
		if kind := batchKind(it.m); kind != 0 {
			for j < len(batch) && batchKind(batch[j].m) == kind {
				j++
			}
			ch.handleRun(kind, batch[i:j])
			i = j
			continue
		}
		// Whatever else the client sent follows its acks in the log.
		if e := ch.acks.flush(); e != nil {
			ch.raise(e)
			continue // the item is handled as the channel closes
		}
		if ch.handle(it) {
			return true
		}
		i = j
	}
	return false
}

// handle processes one method; it reports whether the channel ended.
func (ch *channel) handle(it item) bool {
	switch m := it.m.(type) {
	case *wire.ChannelClose:
		ch.c.logger().Debug("client closed channel", "channel", ch.id, "code", m.ReplyCode, "text", m.ReplyText)
		ch.finish(true)
		return true
	case *wire.ChannelCloseOk:
		ch.c.fail(wire.ConnError(replycode.ChannelError, 20, 41, "unexpected channel.close-ok on channel %d", ch.id))
		return false
	case *wire.ChannelFlow:
		if !m.Active {
			ch.c.fail(wire.ConnError(replycode.NotImplemented, 20, 20, "active=false"))
			return false
		}
		ch.c.send(ch.id, &wire.ChannelFlowOk{Active: true})
		return false
	case *wire.ChannelFlowOk:
		return false
	}
	if e := ch.handleMethod(it); e != nil {
		ch.raise(e)
	}
	return false
}

// raise reports an error from a method handler.
func (ch *channel) raise(e *wire.Error) {
	if e.Hard {
		ch.c.fail(e)
	} else {
		ch.fail(e)
	}
}

// finish ends the channel: the broker cancels its consumers and requeues
// its unacknowledged messages, the number is freed, and close-ok is sent
// when the client asked for the close.
//
// A channel that never consumed nor got a message has nothing in the log
// to clean up, so its close costs no log entry.
func (ch *channel) finish(reply bool) {
	_ = ch.acks.drain() // closing: a failure has nobody left to tell
	if ch.stateful {
		cancels, held := ch.heldRequeue()
		// Retried until it commits while the connection lives; when the
		// connection ends, its ConnectionClosed covers the channel. The
		// acks are flushed: what the client was sent is known.
		ch.c.srv.recordEnds(ch.c.ctx, ch.c.logger().With("channel", ch.id), "channel close", cancels, held,
			&proto.Command{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch.ref(),
				Seen: ch.seen(), SeenListed: true}}})
	}
	ch.c.removeChannel(ch)
	if reply {
		ch.c.send(ch.id, &wire.ChannelCloseOk{})
	}
	ch.stop()
}

// deliver takes a delivery the log assigned to this channel (the Sink's
// Deliver, on the node's apply goroutine): never blocks.
func (ch *channel) deliver(d *fsm.Delivery, epoch uint64) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.noteEpoch(refOf(d), epoch)
	ch.carryOut(ch.led.deliver(d, time.Now().UnixMilli()))
}

// carryOut does what a ledger call asked for: deliveries are queued for
// the socket in the order of their wire tags, the held timer is armed,
// the worker is woken for withheld deliveries. Locks: ch.mu held.
func (ch *channel) carryOut(a actions) {
	for _, n := range a.writes {
		ch.writeDelivery(n)
	}
	if a.arm != 0 {
		wait := time.Until(time.UnixMilli(a.arm))
		if ch.heldTimer == nil {
			ch.heldTimer = time.AfterFunc(wait, ch.expireHeld)
		} else {
			ch.heldTimer.Reset(wait)
		}
	}
	if a.requeue {
		ch.kick()
	}
	for _, k := range a.tune {
		go ch.askCredit(k)
	}
}

// expireHeld runs on the held timer: what the channel held past its
// deadline goes back to the log unseen (the log kills it).
func (ch *channel) expireHeld() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.carryOut(ch.led.expire(time.Now().UnixMilli()))
}

// kick wakes the worker to requeue withheld deliveries and raise a failed
// acknowledgement.
func (ch *channel) kick() {
	select {
	case ch.overdueKick <- struct{}{}:
	default:
	}
}

// requeueOverdue hands withheld deliveries back to the log, unseen:
// requeued past their deadline, they die there (dead-lettered as expired)
// as if they had never left the queue. Worker only.
func (ch *channel) requeueOverdue() {
	ch.mu.Lock()
	tags := ch.led.takeOverdue()
	ch.mu.Unlock()
	if len(tags) == 0 {
		return
	}
	sortRefs(tags)
	var failed []logRef
	for _, r := range unseenRequeues(ch.ref(), tags) {
		var err error
		if r.group == 0 {
			_, err = ch.c.srv.node().Submit(ch.c.ctx, r.cmd)
		} else {
			_, err = ch.c.srv.node().SubmitGroup(ch.c.ctx, r.group, []*proto.Command{r.cmd})
		}
		if err == nil {
			continue
		}
		if ch.c.ctx.Err() != nil {
			return // the connection's end requeues them
		}
		// Otherwise they would stay the consumer's, and count against its
		// credit, until the channel closed. Sent again, a requeue that
		// committed after all is refused alone (its tags are gone).
		ch.c.logger().Warn("cannot requeue overdue deliveries yet, retrying", "channel", ch.id, "group", r.group, "count", len(ackTags(r.cmd)), "err", err)
		for _, t := range ackTags(r.cmd) {
			failed = append(failed, logRef{r.group, t})
		}
	}
	if len(failed) > 0 {
		ch.mu.Lock()
		ch.led.requeueFailed(failed)
		ch.mu.Unlock()
		time.AfterFunc(overdueRetry, ch.kick)
		return
	}
	ch.c.logger().Debug("requeued deliveries the client never saw", "channel", ch.id, "count", len(tags))
}

// overdueRetry is the pause before a failed requeue of withheld
// deliveries is sent again.
const overdueRetry = 100 * time.Millisecond

// writeDelivery queues one delivery the ledger numbered. Locks: ch.mu
// held.
func (ch *channel) writeDelivery(n numbered) {
	d := n.d
	props := propertiesFromProto(d.Properties)
	ref := d.Consumer.GetChannel()
	if d.NoAck {
		ref = nil // settled as assigned: the log requeues it to nobody else
	}
	t := refOf(d)
	mk := &mark{epoch: ch.epochOf(t), ch: ref, group: t.group, tag: t.tag}
	if hasDeadline(d) {
		mk.wire, mk.deadline = n.wire, d.Deadline
	}
	ch.c.sendMarked(ch.id, &wire.BasicDeliver{
		ConsumerTag: d.Consumer.GetTag(),
		DeliveryTag: n.wire,
		Redelivered: d.Redelivered,
		Exchange:    d.Exchange,
		RoutingKey:  d.RoutingKey,
	}, &props, d.Body, mk)
}

// takeBack withholds, for an unseen requeue, the delivery the ledger
// numbered wireTag for log tag t, which the writer did not write (guard);
// false when the ledger holds no such delivery. Writer only.
func (ch *channel) takeBack(wireTag uint64, t logRef) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	a, ok := ch.led.takeBack(wireTag, t, time.Now().UnixMilli())
	ch.carryOut(a)
	return ok
}

// consumerCancelled sends basic.cancel for a consumer the broker cancelled.
func (ch *channel) consumerCancelled(tag string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	known, a := ch.led.cancelled(tag)
	if !known {
		return
	}
	ch.carryOut(a)
	if capability(ch.c.caps, "consumer_cancel_notify") {
		ch.c.send(ch.id, &wire.BasicCancel{ConsumerTag: tag, NoWait: true})
	}
}

// consumerTimedOut takes back what the log requeued for a consumer whose
// delivery timed out (logTags, of the log of the consumer's queue: the
// ledger knows its group) and tells the client: basic.cancel when
// it announced consumer_cancel_notify, as RabbitMQ 4.3 does, else the
// channel closes with 406 as before (its close requeues the rest, as any
// close does). A client that cancelled the consumer meanwhile is told
// nothing more.
func (ch *channel) consumerTimedOut(tag string, timeout int64, logTags []uint64) {
	ch.mu.Lock()
	if ch.led.closed {
		ch.mu.Unlock()
		return
	}
	known := ch.led.timedOut(tag, logTags)
	notify := capability(ch.c.caps, "consumer_cancel_notify")
	if notify && known {
		ch.c.send(ch.id, &wire.BasicCancel{ConsumerTag: tag, NoWait: true})
	}
	ch.mu.Unlock()
	if !notify {
		ch.fail(timeoutError(ch.id, timeout))
	}
}

// timeoutError is RabbitMQ's channel.close for a delivery left
// unacknowledged past its consumer timeout (ms).
func timeoutError(id uint16, timeout int64) *wire.Error {
	return wire.ChanError(replycode.PreconditionFailed, 0, 0,
		"delivery acknowledgement on channel %d timed out. Timeout value used: %d ms. "+
			"This timeout value can be configured, see consumers doc guide to learn more", id, timeout)
}
