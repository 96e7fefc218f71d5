package fsm

import (
	"container/heap"
	"errors"
	"math"
	"strconv"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// DelayedExchangeType is the exchange type of the delayed-message plugin:
// a message published with an x-delay header waits in the exchange, in
// the log's state, until log time reaches its due time, and is then routed
// as the exchange's x-delayed-type routes, with the bindings of that time.
const DelayedExchangeType = "x-delayed-message"

// delayedLevel is the protocol level that introduced delayed exchanges
// and ReleaseDelayed.
const delayedLevel = 6

// MaxDelay is the longest x-delay (ms) that delays a message: the plugin's
// bound (an Erlang timer's). A longer one routes at once, as there.
const MaxDelay = 1<<32 - 1

// MaxReleaseBatch bounds the messages one ReleaseDelayed releases, so that
// a burst due in one millisecond becomes several bounded entries.
const MaxReleaseBatch = 10000

// DelayedReleaseBatch is how many messages a leader releases per command.
const DelayedReleaseBatch = 1000

// delayedMsg is one message waiting in a delayed exchange. m holds what a
// queued message does, with Deadline the due time, Enqueued the time it
// was delayed and Seq its place among the delayed messages (ties of one
// due time release in that order); v and x are where it waits. 144 bytes,
// about 172 with its heap slot and encoded properties
// (BenchmarkDelayedMemory).
type delayedMsg struct {
	m queue.Message
	v *vhost
	x *exchange
}

// delayedSet is a min-heap on (due, seq). Its slice order is state: heap
// operations are deterministic, and a snapshot writes the slice as it is
// and a restore reads it back as it was, so every replica holds the same
// order whichever way it got there.
type delayedSet struct {
	h   []*delayedMsg
	seq uint64 // the last Seq given
}

func (d *delayedSet) Len() int { return len(d.h) }
func (d *delayedSet) Less(i, j int) bool {
	a, b := &d.h[i].m, &d.h[j].m
	if a.Deadline != b.Deadline {
		return a.Deadline < b.Deadline
	}
	return a.Seq < b.Seq
}
func (d *delayedSet) Swap(i, j int) { d.h[i], d.h[j] = d.h[j], d.h[i] }
func (d *delayedSet) Push(x any)    { d.h = append(d.h, x.(*delayedMsg)) }
func (d *delayedSet) Pop() any {
	n := len(d.h) - 1
	x := d.h[n]
	d.h[n] = nil
	d.h = d.h[:n]
	return x
}

// routeScratch is what route learns about delayed exchanges on its way:
// the x-delay of the message (read once, when a delayed exchange is met)
// and the delayed exchanges that hold it. Not state.
type routeScratch struct {
	known bool
	delay int64
	held  []*exchange
	// probe routes through delayed exchanges as their x-delayed-type,
	// to learn where a message would go now (mandatory).
	probe bool
}

func (r *routeScratch) reset() {
	r.known = false
	clear(r.held)
	r.held = r.held[:0]
}

// delayedType reports whether t is the delayed exchange type and the log
// has the level that knows it.
func (s *state) delayedType(t string) bool {
	return t == DelayedExchangeType && s.atLeast(delayedLevel)
}

// delayedVia checks a new delayed exchange's x-delayed-type and returns
// it, as the plugin's validate does: missing, not a string, or itself
// x-delayed-message is 406; an unknown type is what declaring an exchange
// of that type would answer. "" for other exchange types.
func delayedVia(typ string, args *proto.Table) (string, *proto.Result) {
	if typ != DelayedExchangeType {
		return "", nil
	}
	v, ok := tableGet(args, "x-delayed-type")
	var t string
	if ok {
		if lv, isLong := v.GetKind().(*proto.Value_LongString); isLong {
			t = string(lv.LongString)
		} else {
			ok = false
		}
	}
	switch {
	case !ok:
		return "", refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type")
	case t == DelayedExchangeType:
		return "", refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'")
	case !validType(t):
		return "", refused(replycode.CommandInvalid, "COMMAND_INVALID - unknown exchange type '"+t+"'")
	}
	return t, nil
}

// restoredVia is delayedVia for an exchange read from a snapshot: it was
// accepted when declared.
func restoredVia(x *exchange) string {
	if x.typ != DelayedExchangeType {
		return ""
	}
	if v, ok := tableGet(x.args, "x-delayed-type"); ok {
		if t, ok := valueString(v); ok && validType(t) {
			return t
		}
	}
	return "direct"
}

func (x *exchange) routingType() string {
	if x.via != "" {
		return x.via
	}
	return x.typ
}

// holds reports whether x is a delayed exchange that keeps a message with
// these headers (an x-delay within (0, MaxDelay]); route then goes no
// further through x and records it.
func (s *state) holds(x *exchange, headers *proto.Table) bool {
	r := &s.routing
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

// DelayOf reads a message's x-delay header as the plugin does: any AMQP
// integer as it is, a string as a decimal integer, a float truncated.
// Anything else, or a string that is no integer (on which the plugin's
// channel crashes), is no delay.
func DelayOf(h *proto.Table) (int64, bool) {
	v, ok := tableGet(h, "x-delay")
	if !ok {
		return 0, false
	}
	switch k := v.GetKind().(type) {
	case *proto.Value_Int8:
		return int64(k.Int8), true
	case *proto.Value_Uint8:
		return int64(k.Uint8), true
	case *proto.Value_Int16:
		return int64(k.Int16), true
	case *proto.Value_Uint16:
		return int64(k.Uint16), true
	case *proto.Value_Int32:
		return int64(k.Int32), true
	case *proto.Value_Uint32:
		return int64(k.Uint32), true
	case *proto.Value_Int64:
		return k.Int64, true
	case *proto.Value_Float32:
		return truncFloat(float64(k.Float32))
	case *proto.Value_Float64:
		return truncFloat(k.Float64)
	case *proto.Value_LongString:
		return parseDelay(string(k.LongString))
	case *proto.Value_ShortString:
		return parseDelay(k.ShortString)
	case *proto.Value_ByteArray:
		return parseDelay(string(k.ByteArray))
	}
	return 0, false
}

func truncFloat(f float64) (int64, bool) {
	if math.IsNaN(f) || f >= math.MaxInt64 || f <= math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

// parseDelay reads a decimal integer with an optional sign, as Erlang's
// binary_to_integer does; one beyond int64 (clamped) is beyond any delay.
func parseDelay(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return n, true
}

// publishDelayed finishes a publish that a delayed exchange holds: it
// waits there, the copies route found elsewhere (exchange-to-exchange
// bindings past other exchanges) are enqueued now. A mandatory publish
// that would reach no queue with today's bindings is returned now and
// kept nowhere; the plugin returns every mandatory delayed publish at
// once, and delivers it later all the same.
func (s *state) publishDelayed(c *proto.Publish, v *vhost, x *exchange, keys []string, props *proto.Properties,
	bcc []string, body queue.Body, targets []*queueState, msgTTL int64) *proto.Result {
	held := append([]*exchange(nil), s.routing.held...)
	delay := s.routing.delay
	if c.GetMandatory() {
		s.routing.probe = true
		now := s.route(v, x, keys, props.GetHeaders())
		s.routing.probe = false
		if len(now) == 0 {
			return &proto.Result{}
		}
	}
	enc := encodeProps(props)
	for _, hx := range held {
		s.hold(v, hx, delay, c.GetRoutingKey(), enc, bcc, body, nil)
	}
	res := &proto.Result{Routed: true}
	s.publishCopies(targets, x.name, c.GetRoutingKey(), props, enc, bcc, body, nil, msgTTL, res)
	return res
}

// holdDeadLettered keeps a dead-lettered copy of m in the delayed
// exchanges its dead-lettering met (s.routing.held). Like a delayed
// publish, it counts as routed when it is released, not now.
func (s *state) holdDeadLettered(v *vhost, m *queue.Message, rk string, enc []byte) {
	inline, ok := m.Inline()
	if !ok {
		inline = nil
	} else if inline == nil {
		inline = []byte{}
	}
	delay := s.routing.delay
	for _, hx := range append([]*exchange(nil), s.routing.held...) {
		s.hold(v, hx, delay, rk, enc, nil, m.Body, inline)
	}
}

// hold adds a message to x's delayed messages, due after its x-delay.
func (s *state) hold(v *vhost, x *exchange, delay int64, rk string, enc []byte, bcc []string, body queue.Body, inline []byte) {
	s.delayed.seq++
	d := &delayedMsg{v: v, x: x, m: queue.Message{Exchange: x.name, RoutingKey: rk, Props: enc, Body: body,
		Enqueued: s.clock, Deadline: s.clock + delay, MsgTTL: -1, Seq: s.delayed.seq}}
	d.m.SetBCC(bcc)
	if inline != nil {
		d.m.SetInline(inline)
	}
	x.delayed++
	heap.Push(&s.delayed, d)
}

// dropDelayedOf removes the delayed messages of a deleted vhost; a scan of
// every delayed message only when one of its exchanges holds some.
func (s *state) dropDelayedOf(v *vhost) {
	for _, x := range v.exchanges {
		if x.delayed > 0 {
			s.dropDelayed(func(d *delayedMsg) bool { return d.v == v })
			return
		}
	}
}

// dropDelayed removes the delayed messages del selects (their exchange or
// vhost was deleted): they would have routed nowhere.
func (s *state) dropDelayed(del func(*delayedMsg) bool) {
	if len(s.delayed.h) == 0 {
		return
	}
	n := len(s.delayed.h)
	s.delayed.h = deleteFunc(s.delayed.h, func(d *delayedMsg) bool {
		if del(d) {
			d.x.delayed--
			return true
		}
		return false
	})
	if len(s.delayed.h) != n {
		heap.Init(&s.delayed)
	}
}

// applyReleaseDelayed routes the delayed messages due at the log clock,
// earliest first, at most c.Limit of them. A message not due stays: a
// command proposed early, or twice, releases nothing early and nothing
// twice.
func (s *state) applyReleaseDelayed(c *proto.ReleaseDelayed) *proto.Result {
	limit := min(c.GetLimit(), MaxReleaseBatch)
	if s.atLeast(retryLevel) {
		// From level 8 the delayed retries of queues are released too.
		s.releaseDue(limit)
		return &proto.Result{}
	}
	for n := uint32(0); n < limit && len(s.delayed.h) > 0 && s.delayed.h[0].m.Deadline <= s.clock; n++ {
		s.release(heap.Pop(&s.delayed).(*delayedMsg))
	}
	return &proto.Result{}
}

// applyCancelDelayed drops one delayed message before its release.
func (s *state) applyCancelDelayed(c *proto.CancelDelayed) *proto.Result {
	for i, d := range s.delayed.h {
		if d.m.Seq == c.GetSeq() && d.v.name == c.GetVhost() && d.x.name == c.GetExchange() {
			heap.Remove(&s.delayed, i)
			d.x.delayed--
			return &proto.Result{}
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
		s.dropDelayed(func(d *delayedMsg) bool { return d.x == x })
	}
	return &proto.Result{MessageCount: uint32(min(n, math.MaxUint32))}
}

// ReleaseLatenessBucketsMs are the upper bounds, in ms of log time, of
// ReleaseStats.Late; the last count of Late is above them all.
var ReleaseLatenessBucketsMs = [...]int64{0, 1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 60000, 600000, 3600000}

// ReleaseStats count the delayed messages this replica released and how
// late in log time (the release entry's stamp minus the due time). They
// are not state: not in the snapshot or the digest, so a restore starts
// them from zero and a restart counts the log it replays again; every
// replica applies the same releases, so any node's counts describe the
// cluster.
type ReleaseStats struct {
	Released  uint64
	LateSumMs uint64
	// Late counts releases by lateness: Late[i] those at most
	// ReleaseLatenessBucketsMs[i] ms late and more than the bound before.
	Late [len(ReleaseLatenessBucketsMs) + 1]uint64
}

func (r *ReleaseStats) observe(late int64) {
	late = max(late, 0)
	r.Released++
	r.LateSumMs += uint64(late)
	i := 0
	for i < len(ReleaseLatenessBucketsMs) && late > ReleaseLatenessBucketsMs[i] {
		i++
	}
	r.Late[i]++
}

// Releases returns the release counts of this replica.
func (m *Machine) Releases() ReleaseStats { return m.releases }

// KeepReleases carries the release counts of the machine m replaces, so
// that a restore does not set a node's counters back.
func (m *Machine) KeepReleases(old *Machine) { m.releases = old.releases }

// release routes a delayed message now, as a publish to its exchange with
// x-delay set to minus the delay (the plugin's mark of a released message,
// which no delayed exchange delays again). Its copies enter their queues
// now, so queue and message TTLs count from the release.
func (s *state) release(d *delayedMsg) {
	if releaseHook != nil {
		releaseHook(s.clock, d.m.Deadline)
	}
	s.releases.observe(s.clock - d.m.Deadline)
	d.x.delayed--
	m := &d.m
	props := m.Properties()
	if props == nil {
		props = &proto.Properties{}
	}
	if props.Headers == nil {
		props.Headers = &proto.Table{}
	}
	setHeader(props.Headers, "x-delay", releasedDelay(m.Deadline-m.Enqueued))
	keys := append([]string{m.RoutingKey}, headerKeys(props.GetHeaders(), "CC")...)
	keys = append(keys, m.BCC()...)
	msgTTL := int64(-1)
	if props.Expiration != nil {
		if n, err := ttl.ParseExpiration(props.GetExpiration()); err == nil {
			msgTTL = n
		}
	}
	targets := s.route(d.v, d.x, keys, props.GetHeaders())
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
	s.publishCopies(targets, d.x.name, m.RoutingKey, props, encodeProps(props), m.BCC(), m.Body, inline, msgTTL, &proto.Result{})
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

// nextDelayed is the due time and sequence of the earliest delayed message.
func (s *state) nextDelayed() (due int64, seq uint64, ok bool) {
	if len(s.delayed.h) == 0 {
		return 0, 0, false
	}
	return s.delayed.h[0].m.Deadline, s.delayed.h[0].m.Seq, true
}

// NextDelayed returns the due time (log time, unix ms) and sequence of the
// earliest delayed message: the leader releases it once its clock reaches
// that time.
func (m *Machine) NextDelayed() (due int64, seq uint64, ok bool) { return m.nextDelayed() }

// Delayed lists up to limit messages waiting in delayed exchanges, earliest
// due first; vhost and exchange ("" for all) select them. It walks the
// heap in order without sorting it: cost grows with what it skips and
// returns, not with every message held.
func (m *Machine) Delayed(vhost, exchange string, limit int) []*proto.DelayedMessageInfo {
	h := m.delayed.h
	var out []*proto.DelayedMessageInfo
	if len(h) == 0 || limit <= 0 {
		return out
	}
	front := &indexHeap{set: &m.delayed, idx: []int{0}}
	for front.Len() > 0 && len(out) < limit {
		i := heap.Pop(front).(int)
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < len(h) {
				heap.Push(front, c)
			}
		}
		d := h[i]
		if (vhost != "" && d.v.name != vhost) || (exchange != "" && d.x.name != exchange) {
			continue
		}
		out = append(out, &proto.DelayedMessageInfo{Vhost: d.v.name, Exchange: d.x.name, RoutingKey: d.m.RoutingKey, Seq: d.m.Seq,
			DelayedMs: d.m.Enqueued, DueMs: d.m.Deadline, BodySize: d.m.Body.Size, Properties: d.m.Properties()})
	}
	return out
}

// indexHeap orders positions of the delayed heap by their messages.
type indexHeap struct {
	set *delayedSet
	idx []int
}

func (f *indexHeap) Len() int           { return len(f.idx) }
func (f *indexHeap) Less(i, j int) bool { return f.set.Less(f.idx[i], f.idx[j]) }
func (f *indexHeap) Swap(i, j int)      { f.idx[i], f.idx[j] = f.idx[j], f.idx[i] }
func (f *indexHeap) Push(x any)         { f.idx = append(f.idx, x.(int)) }
func (f *indexHeap) Pop() any {
	n := len(f.idx) - 1
	x := f.idx[n]
	f.idx = f.idx[:n]
	return x
}

// delayedDue is the earliest due time of each exchange holding messages.
func (s *state) delayedDue() map[*exchange]int64 {
	if len(s.delayed.h) == 0 {
		return nil
	}
	out := map[*exchange]int64{}
	for _, d := range s.delayed.h {
		if t, ok := out[d.x]; !ok || d.m.Deadline < t {
			out[d.x] = d.m.Deadline
		}
	}
	return out
}

// encDelayed writes the delayed messages in heap order (see delayedSet).
func encDelayed(e *enc, ds *delayedSet) {
	e.u(ds.seq)
	e.u(uint64(len(ds.h)))
	for _, d := range ds.h {
		e.s(d.v.name)
		e.message(&d.m)
	}
}

// decDelayed reads what encDelayed wrote into s, whose exchanges are read.
func decDelayed(d *dec, s *state) bool {
	s.delayed.seq = d.u()
	n := d.n()
	s.delayed.h = make([]*delayedMsg, 0, n)
	for ; n > 0 && d.err == nil; n-- {
		vh := d.s()
		m := decMessage(d)
		v, ok := s.vhosts[vh]
		if !ok {
			return false
		}
		x, ok := v.exchanges[m.Exchange]
		if !ok || x.via == "" {
			return false
		}
		m.Exchange = x.name
		x.delayed++
		s.delayed.h = append(s.delayed.h, &delayedMsg{m: *m, v: v, x: x})
	}
	return d.err == nil
}
