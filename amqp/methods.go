package amqp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"sync"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// Kinds of methods the worker sends to the log together.
const (
	kindNone = iota
	kindPublish
	kindAck
)

// batchKind groups methods that go to the log together.
func batchKind(m wire.Method) int {
	switch m.(type) {
	case *wire.BasicPublish:
		return kindPublish
	case *wire.BasicAck, *wire.BasicNack, *wire.BasicReject:
		return kindAck
	}
	return kindNone
}

// handleRun processes a run of publishes or acknowledgements.
func (ch *channel) handleRun(kind int, run []item) {
	var e *wire.Error
	switch {
	case ch.tx:
		e = ch.bufferTx(run)
	case kind == kindPublish:
		e = ch.handlePublishes(run)
	case kind == kindAck:
		e = ch.handleAcks(run)
	}
	if e != nil {
		ch.raise(e)
	}
}

// handleMethod processes one class method on the channel's worker.
func (ch *channel) handleMethod(it item) *wire.Error {
	switch m := it.m.(type) {
	case *wire.ExchangeDeclare:
		return ch.handleExchangeDeclare(m)
	case *wire.ExchangeDelete:
		return ch.handleExchangeDelete(m)
	case *wire.ExchangeBind:
		return ch.handleExchangeBind(m)
	case *wire.ExchangeUnbind:
		return ch.handleExchangeUnbind(m)
	case *wire.QueueDeclare:
		return ch.handleQueueDeclare(m)
	case *wire.QueueBind:
		return ch.handleQueueBind(m)
	case *wire.QueueUnbind:
		return ch.handleQueueUnbind(m)
	case *wire.QueuePurge:
		return ch.handleQueuePurge(m)
	case *wire.QueueDelete:
		return ch.handleQueueDelete(m)
	case *wire.BasicQos:
		return ch.handleQos(m)
	case *wire.BasicConsume:
		return ch.handleConsume(m)
	case *wire.BasicCancel:
		return ch.handleCancel(m)
	case *wire.BasicGet:
		return ch.handleGet(m)
	case *wire.BasicRecover:
		return ch.handleRecover(m, m.Requeue, true)
	case *wire.BasicRecoverAsync:
		return ch.handleRecover(m, m.Requeue, false)
	case *wire.ConfirmSelect:
		if ch.tx {
			return wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(), "cannot switch from tx to confirm mode")
		}
		ch.confirm = true
		if !m.Nowait {
			ch.c.send(ch.id, &wire.ConfirmSelectOk{})
		}
		return nil
	case *wire.TxSelect:
		return ch.handleTxSelect(m)
	case *wire.TxCommit:
		return ch.handleTxCommit(m)
	case *wire.TxRollback:
		return ch.handleTxRollback(m)
	}
	m := it.m
	return wire.ConnError(replycode.CommandInvalid, m.ClassID(), m.MethodID(), "%s is not a client method", m.Name())
}

// submit sends one command and turns a refusal into the exception for m.
func (ch *channel) submit(m wire.Method, cmd *proto.Command) (*proto.Result, *wire.Error) {
	res, err := ch.c.srv.node().Submit(ch.c.ctx, cmd)
	if err != nil {
		return nil, ch.submitError(m, err)
	}
	if res.GetCode() != 0 {
		return res, resultError(m, res)
	}
	return res, nil
}

// submitIn is submit for a command naming deliveries of group's log: it
// goes to that log. Group 0's go through Submit, as before queue groups.
func (ch *channel) submitIn(m wire.Method, group uint32, cmd *proto.Command) (*proto.Result, *wire.Error) {
	if group == 0 {
		return ch.submit(m, cmd)
	}
	res, err := ch.c.srv.node().SubmitGroup(ch.c.ctx, group, []*proto.Command{cmd})
	if err != nil {
		return nil, ch.submitError(m, err)
	}
	if r := res[0]; r.GetCode() != 0 {
		return r, resultError(m, r)
	}
	return res[0], nil
}

// submitTo proposes cmds, which name deliveries of group's log, to that
// log as one unit: group 0's through SubmitBatch, as before queue groups.
func (s *Server) submitTo(ctx context.Context, group uint32, cmds []*proto.Command) ([]*proto.Result, error) {
	if group == 0 {
		return s.node().SubmitBatch(ctx, cmds)
	}
	return s.node().SubmitGroup(ctx, group, cmds)
}

func (ch *channel) submitError(m wire.Method, err error) *wire.Error {
	if ch.c.ctx.Err() != nil {
		// The connection is going away; nobody is left to tell.
		return nil
	}
	ch.c.logger().Warn("command failed", "channel", ch.id, "method", m.Name(), "err", err)
	return wire.ConnError(replycode.InternalError, m.ClassID(), m.MethodID(), "%s could not be committed: %v", m.Name(), err)
}

// resultError converts a refused command's result into an AMQP exception:
// a channel exception, or a connection exception for a hard reply code.
func resultError(m wire.Method, r *proto.Result) *wire.Error {
	code := uint16(r.GetCode())
	text := r.GetText()
	if name := replycode.Name(code); name != "" && !strings.HasPrefix(text, name) {
		text = name + " - " + text
	}
	return &wire.Error{Code: code, ClassID: m.ClassID(), MethodID: m.MethodID(), Text: text, Hard: replycode.IsHard(code)}
}

func (ch *channel) vhost() string { return ch.c.vhost }

// queueName applies the rule that an empty queue name means the queue
// this channel declared last.
func (ch *channel) queueName(m wire.Method, name string) (string, *wire.Error) {
	if name != "" {
		return name, nil
	}
	if ch.lastQueue == "" {
		// spec: if the client did not previously declare a queue, and the
		// queue name in this method is empty, the server MUST raise a
		// connection exception with reply code 530 (not allowed).
		return "", wire.ConnError(replycode.NotAllowed, m.ClassID(), m.MethodID(), "no previously declared queue")
	}
	return ch.lastQueue, nil
}

func randomName(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

func tableArg(m wire.Method, t wire.Table) (*proto.Table, *wire.Error) {
	pt, err := tableToProto(t)
	if err != nil {
		return nil, wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(), "invalid arguments: %v", err)
	}
	return pt, nil
}

// ---- exchange ----

func (ch *channel) handleExchangeDeclare(m *wire.ExchangeDeclare) *wire.Error {
	if !m.Passive {
		if e := ch.authorize(m, accessConfigure, "exchange", m.Exchange); e != nil {
			return e
		}
		if e := ch.authorizeTarget(m, "exchange", m.Exchange, m.Arguments, "alternate-exchange"); e != nil {
			return e
		}
	}
	args, e := tableArg(m, m.Arguments)
	if e != nil {
		return e
	}
	if _, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{
		Vhost: ch.vhost(), Name: m.Exchange, Type: m.Type, Passive: m.Passive, Durable: m.Durable,
		AutoDelete: m.AutoDelete, Internal: m.Internal, Arguments: args,
	}}}); e != nil {
		return e
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.ExchangeDeclareOk{})
	}
	return nil
}

func (ch *channel) handleExchangeDelete(m *wire.ExchangeDelete) *wire.Error {
	if e := ch.authorize(m, accessConfigure, "exchange", m.Exchange); e != nil {
		return e
	}
	if _, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_ExchangeDelete{ExchangeDelete: &proto.ExchangeDelete{
		Vhost: ch.vhost(), Name: m.Exchange, IfUnused: m.IfUnused,
	}}}); e != nil {
		return e
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.ExchangeDeleteOk{})
	}
	return nil
}

func (ch *channel) handleExchangeBind(m *wire.ExchangeBind) *wire.Error {
	if e := ch.authorizeBind(m, "exchange", m.Destination, m.Source); e != nil {
		return e
	}
	args, e := tableArg(m, m.Arguments)
	if e != nil {
		return e
	}
	if _, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{
		Vhost: ch.vhost(), Source: m.Source, Destination: m.Destination, DestinationIsExchange: true,
		RoutingKey: m.RoutingKey, Arguments: args, Connection: ch.c.ref(),
	}}}); e != nil {
		return e
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.ExchangeBindOk{})
	}
	return nil
}

func (ch *channel) handleExchangeUnbind(m *wire.ExchangeUnbind) *wire.Error {
	if e := ch.authorizeBind(m, "exchange", m.Destination, m.Source); e != nil {
		return e
	}
	args, e := tableArg(m, m.Arguments)
	if e != nil {
		return e
	}
	if _, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_Unbind{Unbind: &proto.Unbind{
		Vhost: ch.vhost(), Source: m.Source, Destination: m.Destination, DestinationIsExchange: true,
		RoutingKey: m.RoutingKey, Arguments: args, Connection: ch.c.ref(),
	}}}); e != nil {
		return e
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.ExchangeUnbindOk{})
	}
	return nil
}

// ---- queue ----

func (ch *channel) handleQueueDeclare(m *wire.QueueDeclare) *wire.Error {
	if strings.HasPrefix(m.Queue, replyQueue) {
		return ch.declareReplies(m)
	}
	args, e := tableArg(m, m.Arguments)
	if e != nil {
		return e
	}
	name := m.Queue
	// authName is the name the configure permission is checked against.
	authName := name
	if name == "" && !m.Passive {
		// Server-named queues are named by the state machine when it
		// applies the declare (it refuses amq.* names from clients), so
		// every replica agrees on the name. The permission is checked
		// against a name of the same amq.gen- form, which is what a
		// permission pattern sees in RabbitMQ.
		authName = randomName("amq.gen-")
	} else if name == "" {
		var e *wire.Error
		if name, e = ch.queueName(m, ""); e != nil {
			return e
		}
		authName = name
	}
	if !m.Passive {
		if e := ch.authorize(m, accessConfigure, "queue", authName); e != nil {
			return e
		}
		if e := ch.authorizeTarget(m, "queue", authName, m.Arguments, "x-dead-letter-exchange"); e != nil {
			return e
		}
		if e := ch.checkQueueLimit(m, authName); e != nil {
			return e
		}
	}
	res, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{
		Vhost: ch.vhost(), Name: name, Passive: m.Passive, Durable: m.Durable, Exclusive: m.Exclusive,
		AutoDelete: m.AutoDelete, Arguments: args, Connection: ch.c.ref(),
	}}})
	if e != nil {
		return e
	}
	if res.GetQueue() != "" {
		name = res.GetQueue()
	}
	ch.lastQueue = name
	if !m.Passive {
		ch.c.srv.counts.queuesDeclared.Add(1)
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.QueueDeclareOk{Queue: name, MessageCount: res.GetMessageCount(), ConsumerCount: res.GetConsumerCount()})
	}
	return nil
}

// checkQueueLimit refuses a new queue when the vhost already holds
// MaxQueuesPerVhost queues, with RabbitMQ's error for its max-queues vhost
// limit. A redeclare of an existing queue is not refused. The check reads
// this node's applied state before the declare is submitted, so it is
// approximate: declares racing on several channels or nodes can each see
// room for one more queue and together pass the limit by a few.
func (ch *channel) checkQueueLimit(m *wire.QueueDeclare, name string) *wire.Error {
	limit := ch.c.srv.cfg.MaxQueuesPerVhost
	if limit <= 0 {
		return nil
	}
	n, exists := ch.c.srv.node().QueueCount(ch.vhost(), name)
	if exists || n < limit {
		return nil
	}
	return wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(),
		"cannot declare queue '%s': queue limit in vhost '%s' (%d) is reached", name, ch.vhost(), limit)
}

func (ch *channel) handleQueueBind(m *wire.QueueBind) *wire.Error {
	q, e := ch.queueName(m, m.Queue)
	if e != nil {
		return e
	}
	if e := ch.authorizeBind(m, "queue", q, m.Exchange); e != nil {
		return e
	}
	args, e := tableArg(m, m.Arguments)
	if e != nil {
		return e
	}
	rk := m.RoutingKey
	if m.Queue == "" && rk == "" {
		// spec: an empty queue name and routing key bind with the last
		// declared queue's name as the key.
		rk = q
	}
	if _, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{
		Vhost: ch.vhost(), Source: m.Exchange, Destination: q, RoutingKey: rk, Arguments: args, Connection: ch.c.ref(),
	}}}); e != nil {
		return e
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.QueueBindOk{})
	}
	return nil
}

func (ch *channel) handleQueueUnbind(m *wire.QueueUnbind) *wire.Error {
	q, e := ch.queueName(m, m.Queue)
	if e != nil {
		return e
	}
	if e := ch.authorizeBind(m, "queue", q, m.Exchange); e != nil {
		return e
	}
	args, e := tableArg(m, m.Arguments)
	if e != nil {
		return e
	}
	if _, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_Unbind{Unbind: &proto.Unbind{
		Vhost: ch.vhost(), Source: m.Exchange, Destination: q, RoutingKey: m.RoutingKey, Arguments: args, Connection: ch.c.ref(),
	}}}); e != nil {
		return e
	}
	ch.c.send(ch.id, &wire.QueueUnbindOk{})
	return nil
}

func (ch *channel) handleQueuePurge(m *wire.QueuePurge) *wire.Error {
	q, e := ch.queueName(m, m.Queue)
	if e != nil {
		return e
	}
	if e := ch.authorize(m, accessRead, "queue", q); e != nil {
		return e
	}
	res, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{
		Vhost: ch.vhost(), Name: q, Connection: ch.c.ref(),
	}}})
	if e != nil {
		return e
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.QueuePurgeOk{MessageCount: res.GetMessageCount()})
	}
	return nil
}

func (ch *channel) handleQueueDelete(m *wire.QueueDelete) *wire.Error {
	q, e := ch.queueName(m, m.Queue)
	if e != nil {
		return e
	}
	if e := ch.authorize(m, accessConfigure, "queue", q); e != nil {
		return e
	}
	res, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{
		Vhost: ch.vhost(), Name: q, IfUnused: m.IfUnused, IfEmpty: m.IfEmpty, Connection: ch.c.ref(),
	}}})
	if e != nil {
		return e
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.QueueDeleteOk{MessageCount: res.GetMessageCount()})
	}
	return nil
}

// ---- basic ----

// handleQos records the prefetch for consumers created later on this
// channel. global=false (RabbitMQ 3.3+: per consumer) sets the limit each
// new consumer gets. global=true (RabbitMQ: shared by the channel) has no
// channel-wide credit in the log model; it is applied to each new consumer
// that has no per-consumer limit, which bounds every consumer by it.
func (ch *channel) handleQos(m *wire.BasicQos) *wire.Error {
	if m.PrefetchSize != 0 {
		return wire.ConnError(replycode.NotImplemented, m.ClassID(), m.MethodID(), "prefetch_size!=0 (%d)", m.PrefetchSize)
	}
	if m.Global {
		ch.prefetchGlobal = m.PrefetchCount
	} else {
		ch.prefetch = m.PrefetchCount
	}
	ch.requalify()
	ch.c.send(ch.id, &wire.BasicQosOk{})
	return nil
}

// requalify gives the channel's consumers its prefetch, now that a
// basic.qos changed it. RabbitMQ applies a new prefetch only to the
// consumers started after it; the AMQP spec's prefetch is the channel's,
// and clients written to it raise the prefetch of a running consumer to
// take more while they hold what they cannot settle yet: a Celery worker
// does for each task with an ETA it holds, and kept at its old prefetch
// it takes no new task until the held ones come due. So each consumer
// that acknowledges gets the channel's prefetch at once (LavinMQ does the
// same). The change commits in each consumer's log before qos-ok. A log
// below protocol level 25 keeps the consumer's prefetch as it was: the
// group's submitter leaves the field out and only the credit is set, or,
// where this node holds no state of the group, the leader refuses the
// command. qos-ok is sent all the same: the client's setting stands for
// later consumers, and the node's window follows it.
func (ch *channel) requalify() {
	ch.mu.Lock()
	var a actions
	changes := ch.led.setPrefetch(&a, ch.consumerPrefetch(), ch.c.srv.cfg.ConsumerLookahead, time.Now().UnixMilli())
	ch.carryOut(a)
	ch.mu.Unlock()
	// The consumers' commands go side by side: each waits for its own
	// commit, and a channel with many consumers would otherwise wait for
	// as many commits in a row before qos-ok.
	b := ch.c.srv.node()
	var wg sync.WaitGroup
	for _, x := range changes {
		p := x.prefetch
		cmd := &proto.Command{Cmd: &proto.Command_Credit{Credit: &proto.Credit{
			Consumer: &proto.ConsumerRef{Channel: ch.ref(), Tag: x.consumer}, Credit: x.credit, Prefetch: &p,
		}}}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ch.c.ctx, 10*time.Second)
			defer cancel()
			r, err := b.Submit(ctx, cmd)
			if err != nil || r.GetCode() != 0 {
				ch.c.logger().Debug("a consumer's prefetch not changed in its log", "consumer", x.consumer, "err", err, "text", r.GetText())
			}
		})
	}
	wg.Wait()
}

func (ch *channel) consumerPrefetch() uint32 {
	if ch.prefetch != 0 {
		return uint32(ch.prefetch)
	}
	return uint32(ch.prefetchGlobal)
}

func (ch *channel) handleConsume(m *wire.BasicConsume) *wire.Error {
	if m.Queue == replyQueue {
		return ch.consumeReplies(m)
	}
	q, e := ch.queueName(m, m.Queue)
	if e != nil {
		return e
	}
	if e := ch.authorize(m, accessRead, "queue", q); e != nil {
		return e
	}
	args, e := tableArg(m, m.Arguments)
	if e != nil {
		return e
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = randomName("amq.ctag-")
	}
	prefetch := ch.consumerPrefetch()
	credit := consumerCredit(prefetch, m.NoAck, ch.c.srv.cfg.ConsumerLookahead)
	ch.mu.Lock()
	// Deliveries the log assigns before consume-ok is written wait in the
	// ledger.
	fresh := ch.led.startConsume(tag, prefetch, credit)
	ch.mu.Unlock()
	if !fresh {
		return wire.ConnError(replycode.NotAllowed, m.ClassID(), m.MethodID(), "attempt to reuse consumer tag '%s'", tag)
	}

	ch.stateful = true
	res, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{
		Vhost: ch.vhost(), Queue: q,
		Consumer: &proto.ConsumerRef{Channel: ch.ref(), Tag: tag},
		NoAck:    m.NoAck, Exclusive: m.Exclusive, Prefetch: prefetch, Credit: credit, Arguments: args,
	}}})
	ch.mu.Lock()
	defer ch.mu.Unlock()
	active, a := ch.led.consumed(tag, e == nil)
	if e != nil {
		return e
	}
	if active && !m.NoAck {
		ch.led.acking(tag, prefetch)
	}
	if res.GetConsumerTag() != "" && res.GetConsumerTag() != tag {
		ch.c.logger().Warn("consumer tag changed by the broker", "sent", tag, "got", res.GetConsumerTag())
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.BasicConsumeOk{ConsumerTag: tag})
	}
	if !active {
		// Cancelled by the broker before consume-ok: tell the client now.
		if capability(ch.c.caps, "consumer_cancel_notify") {
			ch.c.send(ch.id, &wire.BasicCancel{ConsumerTag: tag, NoWait: true})
		}
		return nil
	}
	ch.carryOut(a)
	return nil
}

func (ch *channel) handleCancel(m *wire.BasicCancel) *wire.Error {
	if ch.cancelReplies(m) {
		return nil
	}
	if _, e := ch.submit(m, &proto.Command{Cmd: &proto.Command_Cancel{Cancel: &proto.Cancel{
		Consumer: &proto.ConsumerRef{Channel: ch.ref(), Tag: m.ConsumerTag},
	}}}); e != nil {
		ch.mu.Lock()
		var a actions
		ch.led.notCancelling(&a, m.ConsumerTag, time.Now().UnixMilli())
		ch.carryOut(a)
		ch.mu.Unlock()
		return e
	}
	ch.mu.Lock()
	held := ch.led.cancel(m.ConsumerTag)
	ch.mu.Unlock()
	sortRefs(held)
	// What this node held for the consumer goes back to the queue before
	// cancel-ok, as in RabbitMQ, where the queue never handed it out: a
	// consumer that takes over once the cancel is answered finds it there.
	for _, r := range unseenRequeues(ch.ref(), held) {
		if _, e := ch.submitIn(m, r.group, r.cmd); e != nil {
			return e
		}
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.BasicCancelOk{ConsumerTag: m.ConsumerTag})
	}
	return nil
}

func (ch *channel) handleGet(m *wire.BasicGet) *wire.Error {
	q, e := ch.queueName(m, m.Queue)
	if e != nil {
		return e
	}
	if e := ch.authorize(m, accessRead, "queue", q); e != nil {
		return e
	}
	ch.stateful = true
	cmd := &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{
		Vhost: ch.vhost(), Queue: q, NoAck: m.NoAck, Channel: ch.ref(),
	}}}
	// Read before the log decides (silence.go): a silence after it may
	// have handed the message to another consumer.
	epoch := ch.c.srv.epoch()
	res, err := ch.c.srv.node().Submit(ch.c.ctx, cmd)
	if err != nil {
		res, epoch, err = ch.resolveGet(q, cmd, err)
		if err != nil {
			return ch.submitError(m, err)
		}
	}
	if res.GetCode() != 0 {
		return resultError(m, res)
	}
	g := res.GetGet()
	if g == nil {
		ch.c.srv.counts.getEmpty.Add(1)
		ch.c.send(ch.id, &wire.BasicGetEmpty{})
		return nil
	}
	props := propertiesFromProto(g.GetProperties())
	// Numbered and queued under mu, like deliveries: wire tags reach the
	// client in order.
	var ref *proto.ChannelRef
	if !m.NoAck {
		ref = ch.ref()
	}
	// The log tag is that of the queue's group's log, which GetOk names.
	group := g.GetGroup()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.c.sendDecided(ch.id, &wire.BasicGetOk{
		DeliveryTag: ch.led.got(group, g.GetDeliveryTag(), m.NoAck), Redelivered: g.GetRedelivered(), Exchange: g.GetExchange(),
		RoutingKey: g.GetRoutingKey(), MessageCount: g.GetMessageCount(),
	}, &props, g.GetBody(), epoch, ref, logRef{group, g.GetDeliveryTag()})
	return nil
}

// handleRecover requeues every unacknowledged delivery of the channel.
// requeue=false (redeliver to the same consumer) is refused with 540
// NOT_IMPLEMENTED, as RabbitMQ refuses it.
func (ch *channel) handleRecover(m wire.Method, requeue bool, reply bool) *wire.Error {
	if !requeue {
		return wire.ConnError(replycode.NotImplemented, m.ClassID(), m.MethodID(), "requeue=false")
	}
	// The deliveries this node assigned so far, by name: one the log
	// assigns while this is on its way is new, and is delivered as usual.
	tags := ch.recoverTags()
	for _, g := range byGroup(tags) {
		if _, e := ch.submitIn(m, g.group, settleTags(ch.ref(), g.tags, true, false)); e != nil || ch.c.ctx.Err() != nil {
			// Not handed back, or not known to be: the client had them,
			// so the close names them as seen (those already handed back
			// the log no longer holds under these tags).
			ch.noteSeen(tags)
			return e
		}
	}
	if reply {
		ch.c.send(ch.id, &wire.BasicRecoverOk{})
	}
	return nil
}

// handleAcks hands a run of basic.ack, basic.nack and basic.reject to the
// channel's ack sender (acks.go); a failure of an earlier run is raised.
func (ch *channel) handleAcks(run []item) *wire.Error {
	// The run goes to the log even when an earlier one failed: the
	// client sent it before the channel's close, and its deliveries left
	// what the client holds as the reader took it.
	ch.acks.add(run)
	return ch.acks.failure()
}

func (ch *channel) submitBatch(cmds []*proto.Command) ([]*proto.Result, error) {
	if len(cmds) == 1 {
		r, err := ch.c.srv.node().Submit(ch.c.ctx, cmds[0])
		if err != nil {
			return nil, err
		}
		return []*proto.Result{r}, nil
	}
	return ch.c.srv.node().SubmitBatch(ch.c.ctx, cmds)
}

// handlePublishes sends a run of basic.publish to the log as one batch,
// then answers each in order: basic.return for an unroutable mandatory
// message, then its confirm when the channel is in confirm mode. A
// publish to a reply-to name goes to its requester instead (replyto.go),
// after the publishes before it were answered.
func (ch *channel) handlePublishes(run []item) *wire.Error {
	var cmds []*proto.Command
	ref := ch.ref()
	// cmds stands for run[start:start+len(cmds)].
	start := 0
	flush := func() *wire.Error {
		if len(cmds) == 0 {
			return nil
		}
		e := ch.publishBatch(run[start:start+len(cmds)], cmds)
		cmds = nil
		return e
	}
	for i := range run {
		it := &run[i]
		m := it.m.(*wire.BasicPublish)
		var cmd *proto.Command
		var e *wire.Error
		if m.Immediate {
			// RabbitMQ refuses immediate=true the same way.
			e = wire.ConnError(replycode.NotImplemented, m.ClassID(), m.MethodID(), "immediate=true")
		} else if e = ch.takePublish(it); e == nil {
			cmd, e = ch.publishCommand(ref, *it)
		}
		if e != nil {
			// The publishes before it in the run were accepted: they go
			// to the log (and are confirmed) before the channel closes,
			// as each would have had it come alone.
			if e2 := flush(); e2 != nil {
				return e2
			}
			return e
		}
		if isReplyRoute(m) {
			if e := flush(); e != nil {
				return e
			}
			ch.publishReply(*it, cmd.GetPublish())
			continue
		}
		if len(cmds) == 0 {
			start = i
			cmds = make([]*proto.Command, 0, len(run)-i)
		}
		cmds = append(cmds, cmd)
	}
	return flush()
}

// publishCommand is the log command of one basic.publish.
func (ch *channel) publishCommand(ref *proto.ChannelRef, it item) (*proto.Command, *wire.Error) {
	m := it.m.(*wire.BasicPublish)
	if e := ch.authorize(m, accessWrite, "exchange", m.Exchange); e != nil {
		return nil, e
	}
	if e := ch.checkUserID(m, it.props); e != nil {
		return nil, e
	}
	props, err := propertiesToProto(it.props)
	if err != nil {
		return nil, wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(), "invalid properties: %v", err)
	}
	return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{
		Vhost: ch.vhost(), Exchange: m.Exchange, RoutingKey: m.RoutingKey, Mandatory: m.Mandatory,
		Properties: props, Body: it.body, Channel: ref,
	}}}, nil
}

// returnUnroutable sends basic.return for a mandatory publish the log
// routed nowhere, and counts the publish as returned or dropped.
func (ch *channel) returnUnroutable(it item, r *proto.Result, epoch uint64) {
	if r.GetRouted() {
		return
	}
	if m := it.m.(*wire.BasicPublish); !m.Mandatory {
		ch.c.srv.counts.dropped.Add(1)
	} else {
		ch.c.srv.counts.returned.Add(1)
		ch.c.sendDecided(ch.id, &wire.BasicReturn{
			ReplyCode: replycode.NoRoute, ReplyText: "NO_ROUTE", Exchange: m.Exchange, RoutingKey: m.RoutingKey,
		}, it.props, it.body, epoch, nil, logRef{})
	}
}

func (ch *channel) publishBatch(run []item, cmds []*proto.Command) *wire.Error {
	first := ch.publishSeq + 1
	if ch.confirm {
		ch.publishSeq += uint64(len(cmds))
	}
	// Confirms and returns are decided by the log: after a silence of
	// this node they wait until it caught up (silence.go).
	epoch := ch.c.srv.epoch()
	confirm := func(m wire.Method) { ch.c.sendDecided(ch.id, m, nil, nil, epoch, nil, logRef{}) }
	results, err := ch.submitBatch(cmds)
	if err != nil {
		if ch.confirm && ch.c.ctx.Err() == nil {
			// Not committed as far as we know: the publisher must resend.
			ch.c.logger().Warn("publish failed", "channel", ch.id, "err", err)
			confirm(&wire.BasicNack{DeliveryTag: ch.publishSeq, Multiple: true})
			return nil
		}
		return ch.submitError(run[0].m, err)
	}
	var (
		ackFrom uint64 // first sequence of the pending run of acks
		ackTo   uint64
	)
	flushAcks := func() {
		if ackTo != 0 {
			confirm(&wire.BasicAck{DeliveryTag: ackTo, Multiple: ackTo > ackFrom})
			ackFrom, ackTo = 0, 0
		}
	}
	for i, r := range results {
		m := run[i].m.(*wire.BasicPublish)
		seq := first + uint64(i)
		if r.GetCode() != 0 {
			flushAcks()
			return resultError(m, r)
		}
		ch.returnUnroutable(run[i], r, epoch)
		if !ch.confirm {
			continue
		}
		if r.GetRejected() {
			flushAcks()
			confirm(&wire.BasicNack{DeliveryTag: seq})
			continue
		}
		// Consecutive acks coalesce into one with multiple set; every
		// earlier sequence was already confirmed, in order.
		if ackTo == 0 {
			ackFrom = seq
		}
		ackTo = seq
		ch.c.srv.counts.confirmed.Add(1)
	}
	flushAcks()
	return nil
}
