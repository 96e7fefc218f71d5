package fsm

import (
	"math"
	"strconv"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
	pb "google.golang.org/protobuf/proto"
)

// What the delayed exchanges do when a command is applied: hold a
// message that meets one (publish, dead-lettering), release, cancel and
// purge. Where the messages wait is delayed_set.go, what operators see of
// them delayed_list.go.

// MaxDelay is the longest x-delay (ms) that delays a message: the plugin's
// bound (an Erlang timer's). A longer one routes at once, as there.
const MaxDelay = 1<<32 - 1

// MaxReleaseBatch bounds the messages one ReleaseDelayed releases, so that
// a burst due in one millisecond becomes several bounded entries.
const MaxReleaseBatch = 10000

// DelayedReleaseBatch is how many messages a leader releases per command.
const DelayedReleaseBatch = 1000

// holds reports whether x is a delayed exchange that keeps a message with
// these headers (an x-delay within (0, MaxDelay]); route then goes no
// further through x and records it in r.
func (r *routing) holds(x *exchange, headers *proto.Table) bool {
	if x.via == "" || r.probe {
		return false
	}
	if !r.known {
		r.delay, _ = DelayOf(headers)
		r.known = true
	}
	if r.delay <= 0 || r.delay > MaxDelay {
		return false
	}
	r.held = append(r.held, x)
	return true
}

// publishDelayed finishes a publish that a delayed exchange holds (rt):
// it waits there, the copies route found elsewhere (exchange-to-exchange
// bindings past other exchanges) are enqueued now. A mandatory publish
// that would reach no queue with today's bindings is returned now and
// kept nowhere; the plugin returns every mandatory delayed publish at
// once, and delivers it later all the same.
func (s *state) publishDelayed(c *proto.Publish, v *vhost, x *exchange, keys []string, props *proto.Properties,
	bcc []string, body queue.Body, rt routing, msgTTL int64) *proto.Result {
	if c.GetMandatory() && len(s.probe(v, x, keys, props)) == 0 {
		return &proto.Result{}
	}
	enc := encodeProps(props)
	kept := s.heldProps(props, enc)
	for _, hx := range rt.held {
		s.hold(v, hx, rt.delay, c.GetRoutingKey(), kept, bcc, body, nil)
	}
	res := &proto.Result{Routed: true}
	s.publishCopies(rt.queues, x.name, c.GetRoutingKey(), props, enc, bcc, body, nil, msgTTL, res)
	return res
}

// holdDeadLettered keeps a dead-lettered copy of m in the delayed
// exchanges its dead-lettering met (rt.held). Like a delayed publish, it
// counts as routed when it is released, not now.
func (s *state) holdDeadLettered(v *vhost, m *queue.Message, rk string, enc []byte, rt routing) {
	inline, ok := m.Inline()
	if !ok {
		inline = nil
	} else if inline == nil {
		inline = []byte{}
	}
	if s.atLeast(levelSharedDelay) {
		// A copy of its own: no clone needed (heldProps).
		var p proto.Properties
		if pb.Unmarshal(enc, &p) == nil {
			if _, ok := tableGet(p.GetHeaders(), "x-delay"); ok {
				enc = withoutDelay(&p)
			}
		}
	}
	for _, hx := range rt.held {
		s.hold(v, hx, rt.delay, rk, enc, nil, m.Body, inline)
	}
}

// heldDelay stands in a held message's properties for the x-delay it was
// published with. No held message had an x-delay that reads as 0 (0 routes
// at once), so it cannot be taken for one.
var heldDelay = &proto.Value{Kind: &proto.Value_Int32{Int32: 0}}

// heldProps is the encoding a delayed exchange keeps of a message's
// properties (enc is props encoded). From levelSharedDelay the first
// x-delay's value is heldDelay: the delay is in the record (due minus
// enqueued), the release writes minus it in that place (release), and
// messages published alike but for their delays share one table entry
// rather than one each (a million waiting messages held a million
// otherwise identical entries, most of their memory).
func (s *state) heldProps(props *proto.Properties, enc []byte) []byte {
	if !s.atLeast(levelSharedDelay) {
		return enc
	}
	if _, ok := tableGet(props.GetHeaders(), "x-delay"); !ok {
		return enc
	}
	// props is the command's, read by others: the change goes to a copy.
	return withoutDelay(pb.Clone(props).(*proto.Properties))
}

// withoutDelay encodes p, which it changes, with its first x-delay's value
// set to heldDelay; p has an x-delay header.
func withoutDelay(p *proto.Properties) []byte {
	setHeader(p.Headers, "x-delay", heldDelay)
	return encodeProps(p)
}

// applyReleaseDelayed routes the delayed messages due at the log clock,
// earliest first, at most c.Limit of them. A message not due stays: a
// command proposed early, or twice, releases nothing early and nothing
// twice.
func (s *state) applyReleaseDelayed(c *proto.ReleaseDelayed) *proto.Result {
	limit := min(c.GetLimit(), MaxReleaseBatch)
	if s.atLeast(levelRetry) {
		// From levelRetry the delayed retries of queues are released too.
		s.releaseDue(limit)
		return &proto.Result{}
	}
	for n := uint32(0); n < limit; n++ {
		if due, _, ok := s.nextDelayed(); !ok || due > s.clock {
			break
		}
		s.release()
	}
	return &proto.Result{}
}

// applyCancelDelayed drops one delayed message before its release.
func (s *state) applyCancelDelayed(c *proto.CancelDelayed) *proto.Result {
	d := &s.delayed
	for i := 0; i < d.held.Len(); i++ {
		if _, seq, at := d.held.Key(i); seq == c.GetSeq() {
			if v, x := d.where(at); v.name == c.GetVhost() && x.name == c.GetExchange() {
				var m queue.Message
				d.held.Remove(i, &m)
				d.leave(at)
				return &proto.Result{}
			}
		}
	}
	return refused(replycode.NotFound, "NOT_FOUND - no delayed message "+strconv.FormatUint(c.GetSeq(), 10)+" in "+rs("exchange", c.GetExchange(), c.GetVhost()))
}

// applyPurgeDelayed drops every message a delayed exchange holds: one
// pass over the delayed messages, as deleting the exchange makes.
func (s *state) applyPurgeDelayed(c *proto.PurgeDelayed) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return notFound("vhost", c.GetVhost(), c.GetVhost())
	}
	x, ok := v.exchanges[c.GetExchange()]
	if !ok {
		return notFound("exchange", c.GetExchange(), c.GetVhost())
	}
	if x.via == "" {
		return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - "+rs("exchange", x.name, v.name)+" is not an x-delayed-message exchange")
	}
	n := x.delayed
	if n > 0 {
		s.dropDelayed(func(_ *vhost, dx *exchange) bool { return dx == x })
	}
	return &proto.Result{MessageCount: uint32(min(n, math.MaxUint32))}
}

// release routes the earliest delayed message now, as a publish to its
// exchange with x-delay set to minus the delay (the plugin's mark of a
// released message, which no delayed exchange delays again). Its copies
// enter their queues now, so queue and message TTLs count from the
// release.
func (s *state) release() {
	m := &queue.Message{}
	due, v, x := s.popDelayed(m)
	if releaseHook != nil {
		releaseHook(s.clock, due)
	}
	s.releases.observe(s.clock - due)
	props := m.Properties()
	if props == nil {
		props = &proto.Properties{}
	}
	if props.Headers == nil {
		props.Headers = &proto.Table{}
	}
	setHeader(props.Headers, "x-delay", releasedDelay(due-m.Enqueued))
	keys := append([]string{m.RoutingKey}, headerKeys(props.GetHeaders(), "CC")...)
	keys = append(keys, m.BCC()...)
	msgTTL := int64(-1)
	if props.Expiration != nil {
		if n, err := ttl.ParseExpiration(props.GetExpiration()); err == nil {
			msgTTL = n
		}
	}
	targets := s.route(v, x, keys, props).queues
	if len(targets) == 0 {
		return
	}
	var inline []byte
	if b, ok := m.Inline(); ok {
		inline = b
		if inline == nil {
			inline = []byte{}
		}
	}
	s.publishCopies(targets, x.name, m.RoutingKey, props, encodeProps(props), m.BCC(), m.Body, inline, msgTTL, &proto.Result{})
}

// releasedDelay is the x-delay of a released copy: minus the delay, a
// signed 32-bit integer where it fits, as the plugin wrote it for years
// (a long from RabbitMQ 4 on). pika 1.2 reads a negative long as a huge
// unsigned number, and delays beyond 24 days are rare.
func releasedDelay(d int64) *proto.Value {
	if d <= math.MaxInt32 {
		return &proto.Value{Kind: &proto.Value_Int32{Int32: int32(-d)}}
	}
	return &proto.Value{Kind: &proto.Value_Int64{Int64: -d}}
}

// releaseHook lets tests observe every release.
var releaseHook func(now, due int64)
