package fsm

import (
	"slices"
	"strconv"
	"strings"

	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// parseQueueArgs validates the declare arguments into q.
func parseQueueArgs(q *queueState, args *proto.Table) *proto.Result {
	for _, f := range args.GetFields() {
		v := f.GetValue()
		switch f.GetKey() {
		case ttl.ArgMessageTTL:
			n, err := ttl.MessageTTLArg(valueAny(v), q.vhost, q.name)
			if err != nil {
				return ttlRefusal(err)
			}
			q.parsed.messageTTL = ttl.Some(n)
		case ttl.ArgExpires:
			n, err := ttl.ExpiresArg(valueAny(v), q.vhost, q.name)
			if err != nil {
				return ttlRefusal(err)
			}
			q.parsed.expires = ttl.Some(n)
		case "x-max-length", "x-max-length-bytes":
			n, ok := valueAny(v).(int64)
			if !ok {
				return invalidArg(f.GetKey(), q, notInteger(v))
			}
			if n < 0 {
				return invalidArg(f.GetKey(), q, "{value_negative,"+strconv.FormatInt(n, 10)+"}")
			}
			if f.GetKey() == "x-max-length" {
				q.parsed.maxLen = ttl.Some(n)
			} else {
				q.parsed.maxBytes = ttl.Some(n)
			}
		case "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-overflow":
			sv, ok := valueString(v)
			if !ok {
				return invalidArg(f.GetKey(), q, "{unacceptable_type,"+typeName(v)+"}")
			}
			switch f.GetKey() {
			case "x-dead-letter-exchange":
				q.parsed.dlx = &sv
			case "x-dead-letter-routing-key":
				q.parsed.dlrk = &sv
			default:
				if sv != "drop-head" && sv != "reject-publish" && sv != "reject-publish-dlx" {
					return invalidArg(f.GetKey(), q, "invalid_overflow")
				}
				q.parsed.overflow = sv
			}
		default:
			if !q.features {
				continue
			}
			if r := parseFeatureArg(q, f.GetKey(), v); r != nil {
				return r
			}
		}
	}
	return nil
}

func ttlRefusal(err error) *proto.Result {
	if e, ok := err.(*ttl.Error); ok {
		return refused(uint32(e.Code), e.Text)
	}
	return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - "+err.Error())
}

var equivalenceKeys = []string{"x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes", "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-overflow"}

// argEqual compares two argument values: integers by value whatever their
// width, strings by text, anything else structurally.
func argEqual(a, b *proto.Value) bool {
	if pb.Equal(a, b) {
		return true
	}
	x, xok := valueAny(a).(int64)
	y, yok := valueAny(b).(int64)
	if xok && yok {
		return x == y
	}
	xs, xok := valueString(a)
	ys, yok := valueString(b)
	return xok && yok && xs == ys
}

func describe(v *proto.Value, ok bool) string {
	if !ok {
		return "none"
	}
	text := "?"
	switch x := valueAny(v).(type) {
	case int64:
		text = strconv.FormatInt(x, 10)
	case string:
		text = x
	case bool:
		text = boolText(x)
	}
	return "the value '" + text + "' of type '" + typeName(v) + "'"
}

// typeName is RabbitMQ's name of an AMQP field type.
func typeName(v *proto.Value) string {
	switch v.GetKind().(type) {
	case *proto.Value_Bool:
		return "bool"
	case *proto.Value_Int8:
		return "byte"
	case *proto.Value_Uint8:
		return "unsignedbyte"
	case *proto.Value_Int16:
		return "short"
	case *proto.Value_Uint16:
		return "unsignedshort"
	case *proto.Value_Int32:
		return "signedint"
	case *proto.Value_Uint32:
		return "unsignedint"
	case *proto.Value_Int64:
		return "long"
	case *proto.Value_Float32:
		return "float"
	case *proto.Value_Float64:
		return "double"
	case *proto.Value_Decimal:
		return "decimal"
	case *proto.Value_LongString, *proto.Value_ShortString:
		return "longstr"
	case *proto.Value_ByteArray:
		return "binary"
	case *proto.Value_Timestamp:
		return "timestamp"
	case *proto.Value_Table:
		return "table"
	case *proto.Value_Array:
		return "array"
	}
	return "void"
}

func (s *state) applyQueueDeclare(c *proto.QueueDeclare) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	name := c.GetName()
	if name == "" && !c.GetPassive() {
		name = "amq.gen-" + strconv.FormatUint(s.index, 36) + "-" + strconv.Itoa(len(v.queues))
		for v.queues[name] != nil {
			name += "x"
		}
	}
	owner := connRefKey(c.GetConnection())
	if q, ok := v.queues[name]; ok {
		if q.exclusive && q.owner != owner {
			return locked(name, c.GetVhost())
		}
		if !c.GetPassive() && q.exclusive != c.GetExclusive() {
			return locked(name, c.GetVhost())
		}
		if !c.GetPassive() {
			if q.durable != c.GetDurable() {
				return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - inequivalent arg 'durable' for "+rs("queue", name, c.GetVhost())+": received '"+boolText(c.GetDurable())+"' but current is '"+boolText(q.durable)+"'")
			}
			if q.autoDelete != c.GetAutoDelete() {
				return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for "+rs("queue", name, c.GetVhost())+": received '"+boolText(c.GetAutoDelete())+"' but current is '"+boolText(q.autoDelete)+"'")
			}
			keys := equivalenceKeys
			if q.features {
				keys = append(slices.Clone(keys), featureEquivalenceKeys...)
			}
			if q.retryLevel {
				keys = append(keys, retryEquivalenceKeys...)
			}
			for _, k := range keys {
				a, aok := tableGet(c.GetArguments(), k)
				b, bok := tableGet(q.args, k)
				if aok != bok || (aok && !argEqual(a, b)) {
					return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - inequivalent arg '"+k+"' for "+rs("queue", name, c.GetVhost())+": received "+describe(a, aok)+" but current is "+describe(b, bok))
				}
			}
		}
		q.lastUsed = s.clock
		return &proto.Result{Queue: name, MessageCount: uint32(q.q.Len()) + q.held(), ConsumerCount: uint32(len(q.consumers))}
	}
	if c.GetPassive() {
		return notFound("queue", name, c.GetVhost())
	}
	if r := s.redeclareEnded(v, name, c); r != nil {
		return r
	}
	if strings.HasPrefix(name, "amq.") && c.GetName() != "" {
		return refused(replycode.AccessRefused, "ACCESS_REFUSED - queue name '"+name+"' contains reserved prefix 'amq.*'")
	}
	if r := checkQueueLimit(v, name); r != nil {
		return r
	}
	q := &queueState{queueIdentity: queueIdentity{vhost: c.GetVhost(), name: name, durable: c.GetDurable(), exclusive: c.GetExclusive(),
		autoDelete: c.GetAutoDelete()}, args: c.GetArguments(), lastUsed: s.clock, features: s.atLeast(levelFeatures),
		retryLevel: s.atLeast(levelRetry)}
	q.q.SetTable(s.meta)
	if c.GetExclusive() {
		q.owner = owner
	}
	if r := parseQueueArgs(q, c.GetArguments()); r != nil {
		return r
	}
	if s.atLeast(levelConsumerTimeout) {
		if r := checkConsumerTimeoutArg(q); r != nil {
			return r
		}
	}
	if s.atLeast(levelGroupSize) {
		if r := checkGroupSizeArg(q); r != nil {
			return r
		}
	}
	if s.atLeast(levelLeaderLocator) && s.groups.id == 0 {
		// A queue group's log takes the declare as the metadata log
		// took it, maybe below level 20, whatever its locator says.
		if r := checkLeaderLocatorArg(q); r != nil {
			return r
		}
	}
	v.queues[name] = q
	s.queueChanges.note(q.vhost, name)
	s.stats.Queues++
	q.policy, q.opPolicy = matchPolicies(v, name, "queues")
	s.place(q, s.placeFor(c, q.policy))
	q.placedAt = s.placedAtOf(q, c)
	s.markLeased(q)
	return &proto.Result{Queue: name}
}

func (s *state) lookupQueue(vh, name string, conn *proto.ConnectionRef) (*queueState, *proto.Result) {
	v, ok := s.vhosts[vh]
	if !ok {
		return nil, refused(replycode.NotFound, "NOT_FOUND - no vhost '"+vh+"'")
	}
	q, ok := v.queues[name]
	if !ok {
		return nil, notFound("queue", name, vh)
	}
	if conn != nil && q.exclusive && q.owner != connRefKey(conn) {
		return nil, locked(name, vh)
	}
	return q, nil
}

func (s *state) applyQueueDelete(c *proto.QueueDelete) *proto.Result {
	q, r := s.lookupQueue(c.GetVhost(), c.GetName(), c.GetConnection())
	if r != nil {
		if r.Code == replycode.NotFound {
			if v, ok := s.vhosts[c.GetVhost()]; ok && forgetEnded(v, c.GetName()) {
				s.queueChanges.note(c.GetVhost(), c.GetName())
			}
			return &proto.Result{Queue: c.GetName()}
		}
		return r
	}
	if c.GetIfUnused() && len(q.consumers) > 0 {
		return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - "+rs("queue", q.name, q.vhost)+" in use")
	}
	if c.GetIfEmpty() && (q.q.Len() > 0 || q.retrying > 0) {
		return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - "+rs("queue", q.name, q.vhost)+" not empty")
	}
	n := q.q.Len()
	s.deleteQueue(q, true)
	return &proto.Result{Queue: c.GetName(), MessageCount: uint32(n)}
}

func (s *state) applyQueuePurge(c *proto.QueuePurge) *proto.Result {
	q, r := s.lookupQueue(c.GetVhost(), c.GetName(), c.GetConnection())
	if r != nil {
		return r
	}
	if r := elsewhere(q); r != nil {
		return r
	}
	n := q.q.Purge()
	s.markTimed(q)
	s.stats.Purged += uint64(n)
	n += s.dropRetries(q)
	return &proto.Result{Queue: q.name, MessageCount: uint32(n)}
}

// deleteQueue removes q: its consumers are told (notify), its ready
// messages dropped, its unacked deliveries orphaned (acks become no-ops).
func (s *state) deleteQueue(q *queueState, notify bool) {
	v := s.vhosts[q.vhost]
	for _, c := range q.consumers {
		c.gone = true
		c.ch.consumers = deleteFunc(c.ch.consumers, func(x *consumer) bool { return x == c })
		if notify {
			s.sink.ConsumerCancelled(c.ref)
		}
	}
	q.consumers = nil
	s.stats.Purged += uint64(q.q.Purge())
	s.dropRetries(q)
	q.deleted = true
	s.markTimed(q)
	s.markLeased(q)
	delete(v.queues, q.name)
	s.queueChanges.note(q.vhost, q.name)
	s.stats.Queues--
	s.unplace(q)
	s.removeBindingsTo(v, q.name, false)
}

// enqueue adds m to q (deadline from the queue's effective TTL), enforces
// the length limits and dispatches. fresh marks a just-published message
// that a consumer may still take at TTL 0.
func (s *state) enqueue(q *queueState, m *queue.Message, fresh bool) {
	m.Seq = q.q.NextSeq()
	m.Deadline = deadlineOf(q, m)
	q.q.PushBack(m)
	s.enforceLimits(q)
	var f *queue.Message
	if fresh {
		f = m
	}
	s.dispatch(q, f)
	if fresh && ttl.Expired(m.Deadline, s.clock) {
		if r := q.q.Remove(m); r != nil {
			s.kill(q, r, ttl.ReasonExpired)
		}
	}
	s.markTimed(q)
}

func deadlineOf(q *queueState, m *queue.Message) int64 {
	o := q.queueTTL()
	if m.MsgTTL >= 0 {
		o = ttl.Effective(o, ttl.Some(m.MsgTTL))
	}
	return ttl.DeadlineOf(m.Enqueued, o)
}

// overLimit reports whether adding extra messages of extraBytes would pass
// the queue's limits.
func (q *queueState) overLimit(extra int, extraBytes int64) bool {
	if ml := q.maxLen(); ml.Set && int64(q.q.Len()+extra) > ml.V {
		return true
	}
	if mb := q.maxBytes(); mb.Set && q.q.Bytes()+extraBytes > mb.V {
		return true
	}
	return false
}

func (s *state) enforceLimits(q *queueState) {
	if q.overflow() != "drop-head" {
		return
	}
	for q.q.Len() > 0 && q.overLimit(0, 0) {
		m := q.q.PopFront()
		s.stats.Dropped++
		s.deadLetter(q, m, ttl.ReasonMaxLen)
	}
}

// kill ends a message that died in q: dead-lettered where configured.
func (s *state) kill(q *queueState, m *queue.Message, reason string) {
	if reason == ttl.ReasonExpired {
		s.stats.Expired++
	}
	s.deadLetter(q, m, reason)
}

// dispatch hands ready messages to consumers with credit, round-robin, and
// kills overdue messages met at the head.
func (s *state) dispatch(q *queueState, fresh *queue.Message) {
	s.capLookahead(q)
	for len(q.consumers) > 0 {
		seq, deadline, ok := q.q.Head()
		if !ok {
			return
		}
		isFresh := fresh != nil && seq == fresh.Seq
		if deadline <= s.clock && !isFresh {
			s.kill(q, q.q.PopFront(), ttl.ReasonExpired)
			continue
		}
		c := q.nextConsumer()
		if c == nil {
			return
		}
		m := q.q.PopFront()
		if deliverHook != nil {
			deliverHook(s.clock, m, isFresh)
		}
		s.deliver(q, c, m)
	}
}

func (q *queueState) nextConsumer() *consumer {
	if q.parsed.sac {
		return q.activeConsumer()
	}
	if q.prioritized > 0 {
		return q.nextByPriority()
	}
	n := len(q.consumers)
	for i := 0; i < n; i++ {
		c := q.consumers[(q.rr+i)%n]
		if c.noAck || c.hasCredit() {
			q.rr = (q.rr + i + 1) % n
			return c
		}
	}
	return nil
}

// hasCredit reports whether c may be assigned one more delivery.
func (c *consumer) hasCredit() bool {
	limit := c.prefetch
	if c.credit > limit && limit != 0 && !c.capped {
		limit = c.credit
	}
	return limit == 0 || c.unacked < limit
}

func (s *state) deliver(q *queueState, c *consumer, m *queue.Message) {
	c.ch.nextTag++
	tag := c.ch.nextTag
	s.stats.Delivered++
	q.countDelivery(m, c.noAck)
	if c.noAck {
		s.stats.Acked++
	} else {
		p := &unacked{tag: tag, q: q, m: m, c: c}
		if s.atLeast(levelConsumerTimeout) {
			p.at, p.held = s.clock, c.prefetch != 0 && c.unacked >= c.prefetch
		}
		c.ch.unacked = append(c.ch.unacked, p)
		c.unacked++
		q.unacked++
	}
	if f, ok := s.sink.(DeliveryFilter); ok && !f.WantsDeliveries(c.ref) {
		return
	}
	d := &Delivery{Consumer: c.ref, DeliveryTag: tag, Redelivered: m.Redelivered, Exchange: m.Exchange,
		RoutingKey: m.RoutingKey, Properties: deliveryProps(q, m), BodyRef: m.Body, Deadline: m.Deadline, NoAck: c.noAck,
		Group: s.groups.id}
	d.Body, _ = m.Inline()
	s.sink.Deliver(d)
}

// deliverHook lets tests observe every assignment to a consumer.
var deliverHook func(now int64, m *queue.Message, fresh bool)
