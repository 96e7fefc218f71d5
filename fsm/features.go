package fsm

import (
	"strconv"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// Queue features beyond TTL and length limits: priorities
// (x-max-priority), the delivery limit (x-delivery-limit, delivery-limit
// policy key) and single active consumer (x-single-active-consumer), plus
// the refusal of queue types and arguments raftmq does not implement.

// DefaultDeliveryLimit is the delivery limit of a queue that sets none:
// raftmq's queues are replicated like RabbitMQ 4's quorum queues, which
// default to 20 so that a poison message cannot loop forever. A limit of
// -1 (argument or policy) disables it.
const DefaultDeliveryLimit = 20

// maxPriority is RabbitMQ's highest supported x-max-priority.
const maxPriority = 255

// featureEquivalenceKeys are compared on redeclare, as RabbitMQ compares
// every declare argument it knows.
var featureEquivalenceKeys = []string{"x-max-priority", "x-delivery-limit", "x-single-active-consumer"}

// unsupportedQueueArgs are queue arguments of features raftmq does not have
// (streams): accepting them would silently give a different queue.
var unsupportedQueueArgs = map[string]bool{
	"x-max-age":                       true,
	"x-stream-max-segment-size-bytes": true,
	"x-stream-filter-size-bytes":      true,
	"x-initial-cluster-size":          true,
}

// unsupportedConsumeArgs are basic.consume arguments of stream consumers.
var unsupportedConsumeArgs = map[string]bool{
	"x-stream-offset":                  true,
	"x-stream-filter":                  true,
	"x-stream-match-unfiltered":        true,
	"x-stream-filter-match-unfiltered": true,
}

// notInteger is RabbitMQ's reason for refusing an integer argument given
// v, of another type (ttl.NotInteger).
func notInteger(v *proto.Value) string { return ttl.NotInteger(typeName(v)) }

func invalidArg(key string, q *queueState, why string) *proto.Result {
	return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid arg '"+key+"' for "+rs("queue", q.name, q.vhost)+": "+why)
}

// parseFeatureArg validates one declare argument of the features above;
// other keys are left alone (RabbitMQ ignores unknown x- arguments).
func parseFeatureArg(q *queueState, key string, v *proto.Value) *proto.Result {
	switch key {
	case "x-max-priority":
		n, ok := valueAny(v).(int64)
		switch {
		case !ok:
			return invalidArg(key, q, notInteger(v))
		case n < 0:
			return invalidArg(key, q, "{value_negative,"+strconv.FormatInt(n, 10)+"}")
		case n > maxPriority:
			return invalidArg(key, q, "{max_value_exceeded,"+strconv.FormatInt(n, 10)+"}")
		}
		// 0 is accepted and leaves a plain queue, as in RabbitMQ.
		q.q.SetMaxPriority(uint8(n))
	case "x-delivery-limit":
		n, ok := valueAny(v).(int64)
		if !ok || n < -1 {
			return invalidArg(key, q, "\"expected an integer >= -1, got "+describe(v, true)+"\"")
		}
		q.parsed.deliveryLimit = &n
	case "x-single-active-consumer":
		b, ok := v.GetKind().(*proto.Value_Bool)
		if !ok {
			return invalidArg(key, q, "{unacceptable_type,"+typeName(v)+"}")
		}
		q.parsed.sac = b.Bool
	case "x-queue-type":
		t, ok := valueString(v)
		if !ok {
			return invalidArg(key, q, "{unacceptable_type,"+typeName(v)+"}")
		}
		switch t {
		case "classic", "quorum":
			// Every raftmq queue is replicated through the log either way.
		case "stream":
			// A RabbitMQ queue type raftmq lacks: refused rather than
			// silently made a queue that consumers drain.
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - raftmq does not support queue type '"+t+"'")
		default:
			// RabbitMQ's own refusal of a type it does not know.
			return invalidArg(key, q, "\"unsupported queue type '"+t+"'\"")
		}
	default:
		if ok, r := parseRetryArg(q, key, v); ok {
			return r
		}
		if unsupportedQueueArgs[key] {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - raftmq does not support queue argument '"+key+"' (stream queues)")
		}
	}
	return nil
}

// checkConsumeArgs refuses consume arguments of features raftmq lacks.
func checkConsumeArgs(args *proto.Table) *proto.Result {
	for _, f := range args.GetFields() {
		if unsupportedConsumeArgs[f.GetKey()] {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - raftmq does not support consumer argument '"+f.GetKey()+"' (stream queues)")
		}
	}
	return nil
}

// deliveryLimit is the effective delivery limit: argument, else policy,
// else DefaultDeliveryLimit; -1 means none. An operator policy caps it.
func (q *queueState) deliveryLimit() int64 {
	if !q.features {
		return -1
	}
	limit := int64(DefaultDeliveryLimit)
	if q.parsed.deliveryLimit != nil {
		limit = *q.parsed.deliveryLimit
	} else if d := q.policy.definition(); d != nil && d.DeliveryLimit != nil {
		limit = d.GetDeliveryLimit()
	}
	if d := q.opPolicy.definition(); d != nil && d.DeliveryLimit != nil && d.GetDeliveryLimit() >= 0 {
		if limit < 0 || d.GetDeliveryLimit() < limit {
			limit = d.GetDeliveryLimit()
		}
	}
	return limit
}

func (p *policy) definition() *proto.PolicyDefinition {
	if p == nil {
		return nil
	}
	return p.def.GetDefinition()
}

// returned counts one more return of m (a consumer handed it back, or its
// channel closed with it unacked, as RabbitMQ 4 counts returns) and, past
// the queue's delivery limit, dead-letters it with reason delivery_limit
// (dropped without a dead-letter exchange). It reports whether m died (or,
// on a queue with delayed retry, waits). failed says the return was a
// failed delivery attempt (returnFailed).
func (s *state) returned(q *queueState, m *queue.Message, failed bool) bool {
	if !q.features {
		return false
	}
	if q.retryLevel {
		return s.returnedTwoCounts(q, m, failed)
	}
	m.Returns++
	if limit := q.deliveryLimit(); limit >= 0 && m.Returns > limit {
		s.stats.Rejected++
		s.deadLetter(q, m, ReasonDeliveryLimit)
		return true
	}
	return false
}

// ReasonDeliveryLimit is the x-death reason of a message returned more
// times than its queue's delivery limit allows.
const ReasonDeliveryLimit = "delivery_limit"

// deliveryProps are the properties a message is delivered with: once it
// was returned, the x-delivery-count header says how many times (RabbitMQ
// 4's quorum queue header). Properties() decodes a fresh value, so the
// header goes on that and never on what the queue holds.
func deliveryProps(q *queueState, m *queue.Message) *proto.Properties {
	if q.retryLevel {
		return retryProps(m)
	}
	p := m.Properties()
	if m.Returns == 0 {
		return p
	}
	if p == nil {
		p = &proto.Properties{}
	}
	if p.Headers == nil {
		p.Headers = &proto.Table{}
	}
	setHeader(p.Headers, "x-delivery-count", &proto.Value{Kind: &proto.Value_Int64{Int64: m.Returns}})
	return p
}

// restoreQueueArgs parses the arguments of a restored queue. Before these
// features, x-max-priority, x-delivery-limit, x-single-active-consumer,
// x-queue-type and the stream arguments were accepted whatever their
// value, and such a queue lives on in the state and in every later
// snapshot: a feature value the checks now refuse is ignored, as it was
// then, so the snapshot still loads. The other arguments were checked at
// declare; one that fails now means a corrupt snapshot.
func restoreQueueArgs(q *queueState) *proto.Result {
	rest := &proto.Table{}
	var features []*proto.Field
	for _, f := range q.args.GetFields() {
		switch f.GetKey() {
		case "x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes",
			"x-dead-letter-exchange", "x-dead-letter-routing-key", "x-overflow":
			rest.Fields = append(rest.Fields, f)
		default:
			features = append(features, f)
		}
	}
	if r := parseQueueArgs(q, rest); r != nil {
		return r
	}
	if !q.features {
		return nil
	}
	for _, f := range features {
		_ = parseFeatureArg(q, f.GetKey(), f.GetValue())
	}
	return nil
}

// activeConsumer is the consumer of a single-active-consumer queue that
// may receive: the earliest registered, when it has credit. The others
// wait; the next in registration order takes over when it goes (cancel,
// channel or connection close, NodeDown of its node).
func (q *queueState) activeConsumer() *consumer {
	if len(q.consumers) == 0 {
		return nil
	}
	if c := q.consumers[0]; c.noAck || c.hasCredit() {
		return c
	}
	return nil
}

// activateNext hands ready messages to the consumer that became active
// when the one before it went. Round-robin queues need nothing: their
// other consumers were receiving already.
func (s *state) activateNext(q *queueState) {
	if q.parsed.sac && !q.deleted {
		s.dispatch(q, nil)
	}
}

// mayHold reports whether c's node may hold deliveries it never wrote to
// the client (lookahead beyond the prefetch: amqp/DESIGN.md). On
// basic.cancel the node hands those back with an unseen requeue right
// after the Cancel; for a single-active-consumer queue the next consumer
// must get them before the messages behind them, so its activation waits
// for that requeue. If the node held nothing, unacked beyond the prefetch
// means acks or nacks on their way, whose settling dispatches the queue
// too; a close or NodeDown of the channel activates it in any case.
func (c *consumer) mayHold() bool {
	return c.prefetch != 0 && c.credit > c.prefetch && c.unacked > c.prefetch
}

// activity is RabbitMQ's (active, activity_status) of the queue's i-th
// consumer: "up" without single active consumer, else "single_active"
// for the first and "waiting" for the rest.
func (q *queueState) activity(i int) (bool, string) {
	switch {
	case !q.parsed.sac:
		return true, "up"
	case i == 0:
		return true, "single_active"
	default:
		return false, "waiting"
	}
}

// consumerPriority reads a consumer's x-priority: any integer, 0 when
// absent, as RabbitMQ takes it.
func consumerPriority(q *queueState, args *proto.Table) (int64, *proto.Result) {
	v, ok := tableGet(args, "x-priority")
	if !ok || !q.features {
		return 0, nil
	}
	n, isInt := valueAny(v).(int64)
	if !isInt {
		return 0, invalidArg("x-priority", q, notInteger(v))
	}
	return n, nil
}

// addConsumer appends c to q's consumers (registration order) with its
// priority.
func (q *queueState) addConsumer(c *consumer, prio int64) {
	c.priority = prio
	if prio != 0 {
		q.prioritized++
	}
	q.consumers = append(q.consumers, c)
}

// nextByPriority is nextConsumer for a queue whose consumers have
// priorities: the highest-priority consumer below its prefetch,
// round-robin among equals; lower ones get messages only while every
// higher one is blocked (RabbitMQ's consumer priorities). Only when every
// consumer is at its prefetch does the lookahead credit (assignments a
// node holds beyond the prefetch) come in, again highest first: a high
// consumer's lookahead must not starve a lower one that could take the
// message now.
func (q *queueState) nextByPriority() *consumer {
	for _, open := range []func(*consumer) bool{(*consumer).belowPrefetch, (*consumer).hasCredit} {
		n := len(q.consumers)
		var best *consumer
		at := 0
		for i := 0; i < n; i++ {
			k := (q.rr + i) % n
			c := q.consumers[k]
			if (c.noAck || open(c)) && (best == nil || c.priority > best.priority) {
				best, at = c, k
			}
		}
		if best != nil {
			q.rr = (at + 1) % n
			return best
		}
	}
	return nil
}

func (c *consumer) belowPrefetch() bool { return c.prefetch == 0 || c.unacked < c.prefetch }
