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
	pb "google.golang.org/protobuf/proto"
)

// DelayedExchangeType is the exchange type of the delayed-message plugin:
// a message published with an x-delay header waits in the exchange, in
// the log's state, until log time reaches its due time, and is then routed
// as the exchange's x-delayed-type routes, with the bindings of that time.
const DelayedExchangeType = "x-delayed-message"

// MaxDelay is the longest x-delay (ms) that delays a message: the plugin's
// bound (an Erlang timer's). A longer one routes at once, as there.
const MaxDelay = 1<<32 - 1

// MaxReleaseBatch bounds the messages one ReleaseDelayed releases, so that
// a burst due in one millisecond becomes several bounded entries.
const MaxReleaseBatch = 10000

// DelayedReleaseBatch is how many messages a leader releases per command.
const DelayedReleaseBatch = 1000

// delayedRec is one message waiting in a delayed exchange: 48 bytes
// without a pointer, so that a million waiting messages are nothing for
// the garbage collector to mark. due is its due time, enq the time it was
// delayed, seq its place among the delayed messages (ties of one due time
// release in that order). What it shares with other messages (exchange,
// routing key, encoded properties, BCC keys) is in the state machine's
// queue.Table (meta); where it waits is delayedSet.at[at]; what few have
// (an inline body) is in delayedSet.extra.
type delayedRec struct {
	due, enq   int64
	seq, index uint64 // index: Body.Index
	pos, size  uint32 // Body.Pos, Body.Size
	meta       uint32 // queue.Table handle
	at         uint32 // delayedSet.at
}

// recs is the heap's slice of records, in blocks of recBlock: a growing
// heap adds a block rather than copying itself, so that a million waiting
// messages leave no earlier, smaller copies resident.
type recs struct {
	b [][]delayedRec
	n int
}

const recBlock = 1024

func (r *recs) len() int { return r.n }

func (r *recs) at(i int) *delayedRec { return &r.b[i/recBlock][i%recBlock] }

func (r *recs) push(x delayedRec) {
	if r.n/recBlock == len(r.b) {
		r.b = append(r.b, make([]delayedRec, recBlock))
	}
	r.b[r.n/recBlock][r.n%recBlock] = x
	r.n++
}

// truncate keeps the first n records, freeing the blocks past the one
// after the last in use (one spare, so that a heap at a block's edge does
// not allocate and free it in turn).
func (r *recs) truncate(n int) {
	r.n = n
	keep := min((n+recBlock-1)/recBlock+1, len(r.b))
	if n == 0 {
		keep = 0
	}
	clear(r.b[keep:])
	r.b = r.b[:keep]
}

// delayedAt is where delayed messages wait: an exchange holding some has
// one (exchange.at) until its last leaves, so a record names it in four
// bytes. Not state: ids are never written.
type delayedAt struct {
	v *vhost
	x *exchange
}

// delayedExtra is what few delayed messages have: a body they hold
// (restored from an old snapshot, or dead-lettered from one) and the
// counts a restored message may carry.
type delayedExtra struct {
	inline      []byte
	returns     int64
	failures    int64
	redelivered bool
}

// delayedSet is a min-heap on (due, seq). Its slice order is state: heap
// operations are deterministic, and a snapshot writes the slice as it is
// and a restore reads it back as it was, so every replica holds the same
// order whichever way it got there.
type delayedSet struct {
	h   recs
	seq uint64 // the last Seq given
	at  []delayedAt
	// freeAt are the ids of at no exchange holds.
	freeAt []uint32
	extra  map[uint64]delayedExtra // by seq
	// out is the record the last Pop took (Pop returns nil: a record
	// boxed in an interface would be an allocation per message).
	out delayedRec
}

func (d *delayedSet) Len() int { return d.h.len() }
func (d *delayedSet) Less(i, j int) bool {
	a, b := d.h.at(i), d.h.at(j)
	if a.due != b.due {
		return a.due < b.due
	}
	return a.seq < b.seq
}
func (d *delayedSet) Swap(i, j int) {
	a, b := d.h.at(i), d.h.at(j)
	*a, *b = *b, *a
}
func (d *delayedSet) Push(any) { panic("delayedSet: push with add") }
func (d *delayedSet) Pop() any {
	n := d.h.len() - 1
	d.out = *d.h.at(n)
	d.h.truncate(n)
	return nil
}

// add puts r on the heap, as heap.Push would (Fix of the last is its up).
func (d *delayedSet) add(r delayedRec) {
	d.h.push(r)
	heap.Fix(d, d.h.len()-1)
}

// pop removes and returns the earliest record.
func (d *delayedSet) pop() delayedRec {
	heap.Pop(d)
	return d.out
}

// remove removes and returns the record at i.
func (d *delayedSet) remove(i int) delayedRec {
	heap.Remove(d, i)
	return d.out
}

// where is the vhost and exchange r waits in.
func (d *delayedSet) where(r *delayedRec) (*vhost, *exchange) {
	a := &d.at[r.at]
	return a.v, a.x
}

// enter counts one more message held by x, giving x an id on its first.
func (d *delayedSet) enter(v *vhost, x *exchange) uint32 {
	if x.delayed == 0 {
		if n := len(d.freeAt); n > 0 {
			x.at = d.freeAt[n-1]
			d.freeAt = d.freeAt[:n-1]
			d.at[x.at] = delayedAt{v: v, x: x}
		} else {
			x.at = uint32(len(d.at))
			d.at = append(d.at, delayedAt{v: v, x: x})
		}
	}
	x.delayed++
	return x.at
}

// leave counts one message less held by x, freeing its id with its last.
func (d *delayedSet) leave(x *exchange) {
	if x.delayed--; x.delayed > 0 {
		return
	}
	d.at[x.at] = delayedAt{}
	if len(d.freeAt)+1 == len(d.at) {
		d.at, d.freeAt = nil, nil
		return
	}
	d.freeAt = append(d.freeAt, x.at)
}

// keep adds m, waiting in x, to the heap (at its end, without ordering,
// when ordered is false: a restore reads the slice as it was).
func (s *state) keep(v *vhost, x *exchange, m *queue.Message, ordered bool) {
	d := &s.delayed
	r := delayedRec{due: m.Deadline, enq: m.Enqueued, seq: m.Seq, index: m.Body.Index, pos: m.Body.Pos, size: m.Body.Size,
		meta: s.meta.Intern(m), at: d.enter(v, x)}
	var e delayedExtra
	if b, ok := m.Inline(); ok && b != nil {
		e.inline = b
	}
	e.returns, e.failures, e.redelivered = m.Returns, m.Failures(), m.Redelivered
	if e.inline != nil || e.returns != 0 || e.failures != 0 || e.redelivered {
		if d.extra == nil {
			d.extra = map[uint64]delayedExtra{}
		}
		d.extra[r.seq] = e
	}
	if ordered {
		d.add(r)
	} else {
		d.h.push(r)
	}
}

// delayedMessage sets m from r (m is overwritten).
func (s *state) delayedMessage(r *delayedRec, m *queue.Message) {
	*m = queue.Message{Body: queue.Body{Index: r.index, Pos: r.pos, Size: r.size}, Enqueued: r.enq, Deadline: r.due, Seq: r.seq}
	s.meta.Fill(m, r.meta)
	if e, ok := s.delayed.extra[r.seq]; ok {
		if e.inline != nil {
			m.SetInline(e.inline)
		}
		m.Returns, m.Redelivered = e.returns, e.redelivered
		m.SetFailures(e.failures)
	}
}

// forget drops what r holds beyond the heap slot it leaves.
func (s *state) forget(r *delayedRec) {
	s.meta.Release(r.meta)
	if s.delayed.extra != nil {
		delete(s.delayed.extra, r.seq)
		if len(s.delayed.extra) == 0 {
			s.delayed.extra = nil
		}
	}
	_, x := s.delayed.where(r)
	s.delayed.leave(x)
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
	// draws counts the x-local-random choices of the command at
	// drawIndex, drawPos (state.draw).
	drawIndex uint64
	drawPos   uint32
	draws     uint64
}

func (r *routeScratch) reset() {
	r.known = false
	clear(r.held)
	r.held = r.held[:0]
}

// delayedType reports whether t is the delayed exchange type and the log
// has the level that knows it.
func (s *state) delayedType(t string) bool {
	return t == DelayedExchangeType && s.atLeast(levelDelayed)
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
		now := s.route(v, x, keys, props)
		s.routing.probe = false
		if len(now) == 0 {
			return &proto.Result{}
		}
	}
	enc := encodeProps(props)
	kept := s.heldProps(props, enc)
	for _, hx := range held {
		s.hold(v, hx, delay, c.GetRoutingKey(), kept, bcc, body, nil)
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
	if s.atLeast(levelSharedDelay) {
		// A copy of its own: no clone needed (heldProps).
		var p proto.Properties
		if pb.Unmarshal(enc, &p) == nil {
			if _, ok := tableGet(p.GetHeaders(), "x-delay"); ok {
				enc = withoutDelay(&p)
			}
		}
	}
	for _, hx := range append([]*exchange(nil), s.routing.held...) {
		s.hold(v, hx, delay, rk, enc, nil, m.Body, inline)
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

// listedDelay is the x-delay shown of a waiting message kept without it:
// the delay, a signed 32-bit integer where it fits.
func listedDelay(d int64) *proto.Value {
	if d <= math.MaxInt32 {
		return &proto.Value{Kind: &proto.Value_Int32{Int32: int32(d)}}
	}
	return &proto.Value{Kind: &proto.Value_Int64{Int64: d}}
}

// hold adds a message to x's delayed messages, due after its x-delay.
func (s *state) hold(v *vhost, x *exchange, delay int64, rk string, enc []byte, bcc []string, body queue.Body, inline []byte) {
	s.delayed.seq++
	m := queue.Message{Exchange: x.name, RoutingKey: rk, Props: enc, Body: body,
		Enqueued: s.clock, Deadline: s.clock + delay, MsgTTL: -1, Seq: s.delayed.seq}
	m.SetBCC(bcc)
	if inline != nil {
		m.SetInline(inline)
	}
	s.keep(v, x, &m, true)
}

// dropDelayedOf removes the delayed messages of a deleted vhost; a scan of
// every delayed message only when one of its exchanges holds some.
func (s *state) dropDelayedOf(v *vhost) {
	for _, x := range v.exchanges {
		if x.delayed > 0 {
			s.dropDelayed(func(dv *vhost, _ *exchange) bool { return dv == v })
			return
		}
	}
}

// dropDelayed removes the delayed messages waiting where del selects
// (their exchange or vhost was deleted): they would have routed nowhere.
func (s *state) dropDelayed(del func(*vhost, *exchange) bool) {
	if s.delayed.h.len() == 0 {
		return
	}
	n := s.delayed.h.len()
	w := 0
	for i := 0; i < n; i++ {
		r := *s.delayed.h.at(i)
		if del(s.delayed.where(&r)) {
			s.forget(&r)
			continue
		}
		*s.delayed.h.at(w) = r
		w++
	}
	s.delayed.h.truncate(w)
	if s.delayed.h.len() != n {
		heap.Init(&s.delayed)
	}
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
	for n := uint32(0); n < limit && s.delayed.h.len() > 0 && s.delayed.h.at(0).due <= s.clock; n++ {
		s.release(s.delayed.pop())
	}
	return &proto.Result{}
}

// applyCancelDelayed drops one delayed message before its release.
func (s *state) applyCancelDelayed(c *proto.CancelDelayed) *proto.Result {
	for i := 0; i < s.delayed.h.len(); i++ {
		r := s.delayed.h.at(i)
		if r.seq != c.GetSeq() {
			continue
		}
		if v, x := s.delayed.where(r); v.name == c.GetVhost() && x.name == c.GetExchange() {
			out := s.delayed.remove(i)
			s.forget(&out)
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
		s.dropDelayed(func(_ *vhost, dx *exchange) bool { return dx == x })
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
func (s *state) release(r delayedRec) {
	if releaseHook != nil {
		releaseHook(s.clock, r.due)
	}
	s.releases.observe(s.clock - r.due)
	m := &queue.Message{}
	s.delayedMessage(&r, m)
	v, x := s.delayed.where(&r)
	s.forget(&r)
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
	targets := s.route(v, x, keys, props)
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

// nextDelayed is the due time and sequence of the earliest delayed message.
func (s *state) nextDelayed() (due int64, seq uint64, ok bool) {
	if s.delayed.h.len() == 0 {
		return 0, 0, false
	}
	return s.delayed.h.at(0).due, s.delayed.h.at(0).seq, true
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
	h := &m.delayed.h
	var out []*proto.DelayedMessageInfo
	if h.len() == 0 || limit <= 0 {
		return out
	}
	front := &indexHeap{set: &m.delayed, idx: []int{0}}
	for front.Len() > 0 && len(out) < limit {
		i := heap.Pop(front).(int)
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < h.len() {
				heap.Push(front, c)
			}
		}
		r := h.at(i)
		v, x := m.delayed.where(r)
		if (vhost != "" && v.name != vhost) || (exchange != "" && x.name != exchange) {
			continue
		}
		var dm queue.Message
		m.delayedMessage(r, &dm)
		props := dm.Properties()
		if d, ok := DelayOf(props.GetHeaders()); ok && d == 0 {
			// Kept without its value (heldProps): the delay it asked for.
			setHeader(props.Headers, "x-delay", listedDelay(dm.Deadline-dm.Enqueued))
		}
		out = append(out, &proto.DelayedMessageInfo{Vhost: v.name, Exchange: x.name, RoutingKey: dm.RoutingKey, Seq: dm.Seq,
			DelayedMs: dm.Enqueued, DueMs: dm.Deadline, BodySize: dm.Body.Size, Properties: props})
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
	if s.delayed.h.len() == 0 {
		return nil
	}
	out := map[*exchange]int64{}
	for i := 0; i < s.delayed.h.len(); i++ {
		r := s.delayed.h.at(i)
		_, x := s.delayed.where(r)
		if t, ok := out[x]; !ok || r.due < t {
			out[x] = r.due
		}
	}
	return out
}

// encDelayed writes the delayed messages in heap order (see delayedSet).
func encDelayed(e *enc, s *state) {
	ds := &s.delayed
	e.u(ds.seq)
	e.u(uint64(ds.h.len()))
	var m queue.Message
	for i := 0; i < ds.h.len(); i++ {
		r := ds.h.at(i)
		v, _ := ds.where(r)
		e.s(v.name)
		s.delayedMessage(r, &m)
		e.message(&m)
	}
}

// decDelayed reads what encDelayed wrote into s, whose exchanges are read.
func decDelayed(d *dec, s *state) bool {
	s.delayed.seq = d.u()
	n := d.n()
	s.delayed.h = recs{}
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
		s.keep(v, x, m, false)
	}
	return d.err == nil
}
