package fsm

import (
	"container/heap"
	"strconv"

	"github.com/raftmq/raftmq/internal/replycode"

	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// Delayed retry (RabbitMQ 4.3's quorum queues, LavinMQ's multiplier) and
// the split of a message's returns into acquired-count (every return the
// client saw, Message.Returns) and delivery-count (failed attempts only,
// Message.Failures), for queues declared from protocol level 8 on.
//
// A returned message of such a queue may wait, outside the ready list,
// until log time reaches its due time; the leader's delayed release
// (ReleaseDelayed, cluster/delayed.go) then puts it back at the head of
// its queue. Nothing but the log decides: the due time is entry stamp +
// delay, a release before it changes nothing.

type retryType uint8

const (
	retryDisabled retryType = iota
	retryAll                // every return
	retryFailed             // returns that counted a failed attempt
	retryReturned           // returns that did not
)

var retryTypes = map[string]retryType{"disabled": retryDisabled, "all": retryAll, "failed": retryFailed, "returned": retryReturned}

// retryArgs are a queue's x-delayed-retry-* arguments; nil when absent.
type retryArgs struct {
	typ            *retryType
	min, max, mult *int64
}

// retryEquivalenceKeys are compared on redeclare of a level-8 queue.
var retryEquivalenceKeys = []string{"x-delayed-retry-type", "x-delayed-retry-min", "x-delayed-retry-max", "x-delayed-retry-multiplier"}

// retryMsg is a returned message waiting out its delayed retry.
type retryMsg struct {
	m   *queue.Message
	q   *queueState
	due int64
	seq uint64
}

// retrySet is a min-heap on (due, seq); like delayedSet its slice order is
// state, written and read back as it is.
type retrySet struct {
	h   []*retryMsg
	seq uint64
}

func (r *retrySet) Len() int { return len(r.h) }
func (r *retrySet) Less(i, j int) bool {
	if r.h[i].due != r.h[j].due {
		return r.h[i].due < r.h[j].due
	}
	return r.h[i].seq < r.h[j].seq
}
func (r *retrySet) Swap(i, j int) { r.h[i], r.h[j] = r.h[j], r.h[i] }
func (r *retrySet) Push(x any)    { r.h = append(r.h, x.(*retryMsg)) }
func (r *retrySet) Pop() any {
	n := len(r.h) - 1
	x := r.h[n]
	r.h[n] = nil
	r.h = r.h[:n]
	return x
}

// returnKind is how a command hands a delivery back, as RabbitMQ 4.3
// counts it for AMQP 0-9-1: unseen (a node handing back what its client
// never got) counts nothing; seen (basic.nack, basic.recover, a consumer
// timeout, a node declared down) counts a return, acquired-count; failed
// (basic.reject, Requeue.failed, and a channel or connection that closes
// with the delivery unacknowledged) counts a failed delivery attempt,
// delivery-count, as well.
type returnKind uint8

const (
	returnUnseen returnKind = iota
	returnSeen
	returnFailed
)

// requeueKind is the kind of return a Requeue makes.
func requeueKind(c *proto.Requeue) returnKind {
	switch {
	case c.GetUnseen():
		return returnUnseen
	case c.GetFailed():
		return returnFailed
	}
	return returnSeen
}

// parseRetryArg validates an x-delayed-retry-* argument of a queue
// declared from level 8 on; it reports false for other keys and queues
// (to which such arguments are unknown x- arguments, ignored).
func parseRetryArg(q *queueState, key string, v *proto.Value) (bool, *proto.Result) {
	if !q.retryLevel {
		return false, nil
	}
	switch key {
	case "x-delayed-retry-type":
		t, ok := valueString(v)
		if !ok {
			return true, invalidArg(key, q, "{unacceptable_type,"+typeName(v)+"}")
		}
		rt, known := retryTypes[t]
		if !known {
			return true, invalidArg(key, q, "{unknown_delayed_retry_type,<<\""+t+"\">>}")
		}
		q.parsed.retry.typ = &rt
	case "x-delayed-retry-min", "x-delayed-retry-max", "x-delayed-retry-multiplier":
		n, ok := valueAny(v).(int64)
		switch {
		case !ok:
			return true, invalidArg(key, q, notInteger(v))
		case n < 0:
			return true, invalidArg(key, q, "{value_negative,"+strconv.FormatInt(n, 10)+"}")
		case key == "x-delayed-retry-multiplier" && n == 0:
			return true, invalidArg(key, q, "{value_zero,0}")
		case n > MaxDelay:
			return true, invalidArg(key, q, "{value_too_large,"+strconv.FormatInt(n, 10)+"}")
		}
		switch key {
		case "x-delayed-retry-min":
			q.parsed.retry.min = &n
		case "x-delayed-retry-max":
			q.parsed.retry.max = &n
		default:
			q.parsed.retry.mult = &n
		}
	default:
		return false, nil
	}
	return true, nil
}

// checkRetryPolicy refuses a policy whose delayed-retry keys are out of
// range, with the text of the queue argument's refusal.
func checkRetryPolicy(d *proto.PolicyDefinition) *proto.Result {
	if d == nil {
		return nil
	}
	if d.DelayedRetryType != nil {
		if _, ok := retryTypes[d.GetDelayedRetryType()]; !ok {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid policy value for 'delayed-retry-type': {unknown_delayed_retry_type,<<\""+d.GetDelayedRetryType()+"\">>}")
		}
	}
	for _, f := range []struct {
		key string
		v   *int64
		min int64
	}{{"delayed-retry-min", d.DelayedRetryMin, 0}, {"delayed-retry-max", d.DelayedRetryMax, 0}, {"delayed-retry-multiplier", d.DelayedRetryMultiplier, 1}} {
		if f.v != nil && (*f.v < f.min || *f.v > MaxDelay) {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid policy value for '"+f.key+"': "+strconv.FormatInt(*f.v, 10)+" is not an integer in ["+strconv.FormatInt(f.min, 10)+", "+strconv.FormatInt(MaxDelay, 10)+"]")
		}
	}
	return nil
}

// retryConf is the queue's effective delayed retry: each key from the
// argument, else from the policy. Retry is on when the type is not
// disabled and the minimum above 0; max 0 means no cap, mult 0 linear.
func (q *queueState) retryConf() (typ retryType, lo, hi, mult int64) {
	d := q.policy.definition()
	if q.parsed.retry.typ != nil {
		typ = *q.parsed.retry.typ
	} else if d != nil && d.DelayedRetryType != nil {
		typ = retryTypes[d.GetDelayedRetryType()]
	}
	pick := func(arg *int64, pol *int64) int64 {
		if arg != nil {
			return *arg
		}
		if pol != nil {
			return *pol
		}
		return 0
	}
	if d == nil {
		d = &proto.PolicyDefinition{}
	}
	return typ, pick(q.parsed.retry.min, d.DelayedRetryMin), pick(q.parsed.retry.max, d.DelayedRetryMax), pick(q.parsed.retry.mult, d.DelayedRetryMultiplier)
}

// retryDelay is how long m waits after a return (failed says whether it
// counted a failed attempt); ok is false when it is ready at once. The
// delay is min x delivery-count (at least 1) capped at max, RabbitMQ
// 4.3's linear back-off; with a multiplier it is min x mult^(count-1),
// LavinMQ's exponential one. Never above MaxDelay.
func (q *queueState) retryDelay(m *queue.Message, failed bool) (int64, bool) {
	typ, lo, hi, mult := q.retryConf()
	switch {
	case lo <= 0, typ == retryDisabled, typ == retryFailed && !failed, typ == retryReturned && failed:
		return 0, false
	}
	capAt := int64(MaxDelay)
	if hi > 0 {
		capAt = min(capAt, hi)
	}
	n := max(m.Failures(), 1)
	d := lo
	if mult == 0 {
		if n > capAt/lo {
			d = capAt
		} else {
			d = lo * n
		}
	} else if mult > 1 {
		// At most 32 rounds: d at least doubles each until the cap.
		for i := int64(1); i < n && d < capAt; i++ {
			if d > capAt/mult {
				d = capAt
				break
			}
			d *= mult
		}
	}
	return min(d, capAt), true
}

// returnedTwoCounts is returned for a queue declared from levelRetry on
// (q.retryLevel): every
// seen return counts in acquired-count, a failed one in delivery-count
// too; the delivery limit is on delivery-count (RabbitMQ 4.3), and a
// message within it waits out its delayed retry when the queue has one.
// It reports whether m left the ready list (died or waits).
func (s *state) returnedTwoCounts(q *queueState, m *queue.Message, failed bool) bool {
	m.Returns++
	if failed {
		m.SetFailures(m.Failures() + 1)
	}
	if limit := q.deliveryLimit(); limit >= 0 && m.Failures() > limit {
		s.stats.Rejected++
		s.deadLetter(q, m, ReasonDeliveryLimit)
		return true
	}
	if d, ok := q.retryDelay(m, failed); ok {
		s.retry.seq++
		q.retrying++
		heap.Push(&s.retry, &retryMsg{m: m, q: q, due: s.clock + d, seq: s.retry.seq})
		return true
	}
	return false
}

// releaseDue releases, in due order, what is due at the log clock among
// the delayed exchanges' messages and the delayed retries, at most limit
// of them; on equal due times the exchange's message goes first.
func (s *state) releaseDue(limit uint32) {
	for n := uint32(0); n < limit; n++ {
		due, _, dOK := s.nextDelayed()
		dOK = dOK && due <= s.clock
		rOK := len(s.retry.h) > 0 && s.retry.h[0].due <= s.clock
		switch {
		case dOK && (!rOK || due <= s.retry.h[0].due):
			s.release()
		case rOK:
			s.releaseRetry(heap.Pop(&s.retry).(*retryMsg))
		default:
			return
		}
	}
}

// releaseRetry makes a waiting message ready again at the head of its
// queue, as a return goes; one whose TTL ran out while it waited dies.
func (s *state) releaseRetry(r *retryMsg) {
	q, m := r.q, r.m
	q.retrying--
	if ttl.Expired(m.Deadline, s.clock) {
		s.kill(q, m, ttl.ReasonExpired)
		return
	}
	s.stats.Requeued++
	q.q.PushFront([]*queue.Message{m})
	s.enforceLimits(q)
	s.markTimed(q)
	if !q.deleted {
		s.dispatch(q, nil)
	}
}

// dropRetries removes q's waiting messages (q is deleted or purged) and
// returns how many there were.
func (s *state) dropRetries(q *queueState) int {
	if q.retrying == 0 {
		return 0
	}
	n := q.retrying
	s.retry.h = deleteFunc(s.retry.h, func(r *retryMsg) bool { return r.q == q })
	heap.Init(&s.retry)
	q.retrying = 0
	s.stats.Purged += uint64(n)
	return n
}

// nextRetryDue is the earliest due time of q's waiting messages.
func (s *state) nextRetryDue(q *queueState) int64 {
	var due int64
	if q.retrying == 0 {
		return 0
	}
	for _, r := range s.retry.h {
		if r.q == q && (due == 0 || r.due < due) {
			due = r.due
		}
	}
	return due
}

// NextRelease is the earliest due time (log time, unix ms) of what
// ReleaseDelayed releases, delayed exchanges' messages and delayed
// retries alike, with a token that names that message (it changes once
// the message is released).
func (m *Machine) NextRelease() (due int64, token uint64, ok bool) {
	due, token, ok = m.nextDelayed()
	if len(m.retry.h) > 0 && (!ok || m.retry.h[0].due < due) {
		return m.retry.h[0].due, m.retry.h[0].seq | 1<<63, true
	}
	return due, token, ok
}

// retryProps adds RabbitMQ 4.3's headers to a delivery of a level-8
// queue's message: x-acquired-count once it was returned, x-delivery-count
// once an attempt failed.
func retryProps(m *queue.Message) *proto.Properties {
	p := m.Properties()
	if m.Returns == 0 && m.Failures() == 0 {
		return p
	}
	if p == nil {
		p = &proto.Properties{}
	}
	if p.Headers == nil {
		p.Headers = &proto.Table{}
	}
	if m.Returns > 0 {
		setHeader(p.Headers, "x-acquired-count", &proto.Value{Kind: &proto.Value_Int64{Int64: m.Returns}})
	}
	if f := m.Failures(); f > 0 {
		setHeader(p.Headers, "x-delivery-count", &proto.Value{Kind: &proto.Value_Int64{Int64: f}})
	}
	return p
}

// encRetry writes the waiting messages in heap order.
func encRetry(e *enc, r *retrySet) {
	e.u(r.seq)
	e.u(uint64(len(r.h)))
	for _, w := range r.h {
		e.s(w.q.vhost)
		e.s(w.q.name)
		e.i(w.due)
		e.u(w.seq)
		e.message(w.m)
	}
}

// decRetry reads what encRetry wrote into s, whose queues are read.
func decRetry(d *dec, s *state) bool {
	s.retry.seq = d.u()
	n := d.n()
	s.retry.h = make([]*retryMsg, 0, n)
	for ; n > 0 && d.err == nil; n-- {
		vh, qn := d.s(), d.s()
		due, seq := d.i(), d.u()
		m := decMessage(d)
		v, ok := s.vhosts[vh]
		if !ok {
			return false
		}
		q, ok := v.queues[qn]
		if !ok || !q.retryLevel {
			return false
		}
		q.retrying++
		s.retry.h = append(s.retry.h, &retryMsg{m: m, q: q, due: due, seq: seq})
	}
	return d.err == nil
}
