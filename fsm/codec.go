package fsm

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"unsafe"

	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/internal/offheap"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

// Snapshot format: magic, format version, last index, clock, then records
// in a fixed order (counters, users, permissions, vhosts with exchanges,
// policies and queues, channels). Every map is written in sorted key order.
const (
	snapMagic = "RMQS"
	// 2 adds each consumer's credit, 3 the delivery tag floor, 4 the
	// log's protocol level, 5 each message's returns and each queue's
	// features flag (features.go), 6 each channel's settlement time and
	// each unacknowledged delivery's assignment time and held flag
	// (consumer_timeout.go), 7 names each message's body instead of
	// holding it (queue.Body), holds its properties encoded, and adds
	// the deaths by reason (Stats.Deaths), 8 the messages of delayed
	// exchanges (apply_delayed.go), 9 each queue's retryLevel flag, each
	// message's failed attempts and the messages waiting out a delayed
	// retry (apply_retry.go), 10 the vhosts' limits (vhost_limits.go).
	snapVersion = 10
	// bodyRefFormat is the first format that names bodies.
	bodyRefFormat = 7
	// delayedFormat is the first format that holds delayed messages.
	delayedFormat = 8
)

// enc encodes a snapshot. A lazy enc copies messages into parts instead
// of encoding them (state.snapshot).
type enc struct {
	b     []byte
	lazy  bool
	parts []part
	// format is the snapshot format written; 0 is snapVersion (tests
	// write earlier formats to check that they still load).
	format uint64
	// digest writes each body as its size only: where a node keeps a
	// body (named in the log, or inline after a restore from a format
	// that held bodies) is not state two replicas must agree on.
	digest bool
	// bodyOf gives the bytes of named bodies for formats that held them
	// (tests only: SnapshotAs).
	bodyOf func(queue.Body) []byte
	// collect gathers the names of the bodies written into names.
	collect bool
	names   []queue.Body
}

func (e *enc) version() uint64 {
	if e.format == 0 {
		return snapVersion
	}
	return e.format
}

// reserve announces n messages to come, so their copies are allocated once.
func (e *enc) reserve(n int) {
	if e.lazy && n > 0 {
		e.flushBytes()
		e.parts = append(e.parts, part{msgs: make([]queue.Message, 0, n)})
	}
}

func (e *enc) message(m *queue.Message) {
	if !e.lazy {
		encMessage(e, m)
		return
	}
	e.flushBytes()
	if k := len(e.parts) - 1; k >= 0 && e.parts[k].msgs != nil {
		e.parts[k].msgs = append(e.parts[k].msgs, *m)
		return
	}
	e.parts = append(e.parts, part{msgs: []queue.Message{*m}})
}

func (e *enc) flushBytes() {
	if e.lazy && len(e.b) > 0 {
		e.parts = append(e.parts, part{b: e.b})
		e.b = nil
	}
}

func (e *enc) u(v uint64)  { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) i(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) s(v string)  { e.u(uint64(len(v))); e.b = append(e.b, v...) }
func (e *enc) by(v []byte) { e.u(uint64(len(v))); e.b = append(e.b, v...) }
func (e *enc) bo(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}
func (e *enc) msg(m pb.Message) {
	if m == nil || !m.ProtoReflect().IsValid() {
		e.bo(false)
		return
	}
	e.bo(true)
	b, _ := pb.MarshalOptions{Deterministic: true}.Marshal(m)
	e.by(b)
}

func (s *state) encode() []byte {
	e := &enc{b: make([]byte, 0, 4096)}
	s.encodeTo(e)
	return e.b
}

// encodeTo writes the state to e; with e.lazy, messages are copied for a
// later encoding instead (see lazySnapshot).
func (s *state) encodeTo(e *enc) {
	if e.format == 0 && !s.atLeast(delayedLevel) {
		// Below level 6 no exchange holds delayed messages: format 7
		// says as much, and a node of the release before, still in the
		// cluster during a rolling upgrade, can restore it.
		e.format = delayedFormat - 1
	} else if e.format == 0 && !s.atLeast(retryLevel) {
		// Likewise below level 8 nothing waits for a delayed retry.
		e.format = retryFormat - 1
	} else if e.format == 0 && !s.atLeast(limitsLevel) {
		// Likewise below level 12 no vhost has limits.
		e.format = limitsFormat - 1
	}
	v := e.version()
	e.b = append(e.b, snapMagic...)
	e.u(v)
	e.u(s.index)
	e.i(s.clock)
	e.bo(s.initialized)
	if v >= 3 {
		e.u(s.tagFloor)
	}
	if v >= 4 {
		e.u(uint64(s.level))
	}
	st := s.stats
	for _, v := range []uint64{st.Published, st.Routed, st.Delivered, st.Acked, st.Requeued, st.Expired, st.DeadLettered, st.Dropped, st.Rejected, st.Purged, st.Refused} {
		e.u(v)
	}
	if v >= bodyRefFormat {
		for _, r := range st.Deaths {
			e.u(r[0])
			e.u(r[1])
		}
	}
	e.u(uint64(len(s.users)))
	for _, k := range sortedKeys(s.users) {
		u := s.users[k]
		e.s(u.name)
		e.by(u.hash)
		e.s(u.alg)
		e.u(uint64(len(u.tags)))
		for _, t := range u.tags {
			e.s(t)
		}
	}
	e.u(uint64(len(s.perms)))
	for _, k := range sortedKeys(s.perms) {
		e.msg(s.perms[k])
	}
	e.u(uint64(len(s.vhosts)))
	for _, vk := range sortedKeys(s.vhosts) {
		v := s.vhosts[vk]
		e.s(v.name)
		e.s(v.desc)
		e.u(uint64(len(v.exchanges)))
		for _, xk := range sortedKeys(v.exchanges) {
			x := v.exchanges[xk]
			e.s(x.name)
			e.s(x.typ)
			e.bo(x.durable)
			e.bo(x.autoDelete)
			e.bo(x.intern)
			e.msg(x.args)
			e.u(uint64(len(x.bindings)))
			for _, b := range x.bindings {
				e.s(b.dest)
				e.bo(b.toExchange)
				e.s(b.key)
				e.msg(b.args)
			}
		}
		for _, ps := range []map[string]*policy{v.policies, v.operator} {
			e.u(uint64(len(ps)))
			for _, k := range sortedKeys(ps) {
				e.msg(ps[k].def)
			}
		}
		e.u(uint64(len(v.queues)))
		for _, qk := range sortedKeys(v.queues) {
			q := v.queues[qk]
			e.s(q.name)
			e.bo(q.durable)
			e.bo(q.exclusive)
			e.bo(q.autoDelete)
			e.s(q.owner)
			e.msg(q.args)
			e.bo(q.hadConsumer)
			e.i(q.lastUsed)
			e.u(uint64(q.rr))
			e.u(q.q.Seq())
			if e.version() >= 5 {
				e.bo(q.features)
			}
			if e.version() >= retryFormat {
				e.bo(q.retryLevel)
			}
			e.u(uint64(q.q.Len()))
			e.reserve(q.q.Len())
			q.q.Each(func(m *queue.Message) { e.message(m) })
			e.u(uint64(len(q.consumers)))
			for _, c := range q.consumers {
				e.msg(c.ref)
				e.bo(c.noAck)
				e.bo(c.exclusive)
				e.u(uint64(c.prefetch))
				e.msg(c.args)
				e.u(uint64(c.credit))
			}
		}
	}
	e.u(uint64(len(s.channels)))
	for _, ck := range sortedKeys(s.channels) {
		ch := s.channels[ck]
		e.msg(ch.ref)
		e.u(ch.nextTag)
		if e.version() >= 6 {
			e.i(ch.settled)
		}
		e.u(uint64(len(ch.consumers)))
		for _, c := range ch.consumers {
			e.s(c.q.vhost)
			e.s(c.q.name)
			e.s(c.ref.GetTag())
		}
		e.u(uint64(len(ch.unacked)))
		for _, p := range ch.unacked {
			e.u(p.tag)
			e.s(p.q.vhost)
			e.s(p.q.name)
			e.bo(p.q.deleted)
			live := p.c != nil && !p.c.gone
			e.bo(live)
			if live {
				e.s(p.c.ref.GetTag())
			}
			e.message(p.m)
			if e.version() >= 6 {
				e.i(p.at)
				e.bo(p.held)
			}
		}
	}
	if e.version() >= delayedFormat {
		encDelayed(e, s)
	}
	if e.version() >= retryFormat {
		encRetry(e, &s.retry)
	}
	if e.version() >= limitsFormat {
		encLimits(e, s)
	}
	e.flushBytes()
}

func encMessage(e *enc, m *queue.Message) {
	e.s(m.Exchange)
	e.s(m.RoutingKey)
	if e.version() >= bodyRefFormat {
		e.by(m.Props)
		e.u(uint64(m.Priority))
		e.bo(m.Persistent)
		b, inline := m.Inline()
		if e.collect && !inline {
			e.names = append(e.names, m.Body)
		}
		if e.digest {
			e.u(uint64(m.Body.Size))
		} else if e.bo(inline); inline {
			e.by(b)
		} else {
			e.u(m.Body.Index)
			e.u(uint64(m.Body.Pos))
			e.u(uint64(m.Body.Size))
		}
	} else {
		// Earlier formats held properties and bodies in full; tests
		// write them to check that they still load.
		e.msg(m.Properties())
		b, ok := m.Inline()
		if !ok && e.bodyOf != nil {
			b = e.bodyOf(m.Body)
		}
		e.by(b)
	}
	e.u(uint64(len(m.BCC())))
	for _, k := range m.BCC() {
		e.s(k)
	}
	e.i(m.Enqueued)
	e.i(m.Deadline)
	e.i(m.MsgTTL)
	e.u(m.Seq)
	e.bo(m.Redelivered)
	if e.version() >= 5 {
		e.i(m.Returns)
	}
	if e.version() >= retryFormat {
		e.i(m.Failures())
	}
}

type dec struct {
	b       []byte
	err     error
	version uint64
	inline  bool // a message held its body inline
}

var errCorrupt = errors.New("fsm: corrupt snapshot")

func (d *dec) fail() {
	if d.err == nil {
		d.err = errCorrupt
	}
	d.b = nil
}
func (d *dec) u() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}
func (d *dec) n() int {
	v := d.u()
	if v > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(v)
}
func (d *dec) i() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}
func (d *dec) by() []byte {
	n := d.n()
	if d.err != nil {
		return nil
	}
	v := bytes.Clone(d.b[:n])
	d.b = d.b[n:]
	return v
}
func (d *dec) s() string { return string(d.by()) }
func (d *dec) bo() bool {
	if len(d.b) == 0 {
		d.fail()
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}
func (d *dec) msg(m pb.Message) bool {
	if !d.bo() {
		return false
	}
	if err := pb.Unmarshal(d.by(), m); err != nil && d.err == nil {
		d.err = err
	}
	return true
}
func (d *dec) table() *proto.Table {
	t := &proto.Table{}
	if !d.msg(t) {
		return nil
	}
	return t
}

func decMessage(d *dec) *queue.Message {
	m := &queue.Message{}
	decMessageInto(d, m, false)
	return m
}

// view returns the next length-prefixed bytes without copying them.
func (d *dec) view() []byte {
	n := d.n()
	if d.err != nil {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// viewString is view as a string sharing the snapshot's bytes.
func (d *dec) viewString() string {
	b := d.view()
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// decMessageInto decodes a message into m. With view, its exchange,
// routing key and properties share the snapshot's bytes: for a message
// that goes straight into a queue, which keeps copies of them once
// (queue.Table), so a restore allocates nothing per message.
func decMessageInto(d *dec, m *queue.Message, view bool) {
	if view {
		m.Exchange, m.RoutingKey = d.viewString(), d.viewString()
	} else {
		m.Exchange, m.RoutingKey = d.s(), d.s()
	}
	if d.version >= bodyRefFormat {
		var p []byte
		if view {
			p = d.view()
		} else {
			p = d.by()
		}
		if len(p) > 0 {
			m.Props = p
		}
		m.Priority = uint8(min(d.u(), 255))
		m.Persistent = d.bo()
		if d.bo() {
			m.SetInline(d.by())
			d.inline = true
		} else {
			m.Body = queue.Body{Index: d.u(), Pos: uint32(d.u()), Size: uint32(d.u())}
		}
	} else {
		p := &proto.Properties{}
		if d.msg(p) {
			m.Props = encodeProps(p)
			setPropsFlags(m, p)
		}
		m.SetInline(d.by())
		d.inline = true
	}
	var bcc []string
	for n := d.n(); n > 0 && d.err == nil; n-- {
		bcc = append(bcc, d.s())
	}
	m.SetBCC(bcc)
	m.Enqueued = d.i()
	m.Deadline = d.i()
	m.MsgTTL = d.i()
	m.Seq = d.u()
	m.Redelivered = d.bo()
	if d.version >= 5 {
		m.Returns = d.i()
	}
	if d.version >= retryFormat {
		m.SetFailures(d.i())
	}
}

// snapshot encodes the state under the caller's lock. Messages hold no
// bodies, so this costs about 30 bytes a queued message (44 ms for a
// million, BenchmarkSnapshot): less than copying their structs for a later
// encoding (121 ms for a million, which the lazy form below took), and the
// lock is held once. The lazy form remains for states holding bodies
// inline (restored from a format before 7), where encoding under the lock
// stalled applies for seconds (2.1 s for 400 MB).
func (s *state) snapshot() (io.WriterTo, error) {
	if s.inline {
		e := &enc{b: make([]byte, 0, 4096), lazy: true}
		s.encodeTo(e)
		return &lazySnapshot{parts: e.parts, format: e.version()}, nil
	}
	n := 0
	for _, v := range s.vhosts {
		for _, q := range v.queues {
			n += q.q.Len()
		}
	}
	for _, ch := range s.channels {
		n += len(ch.unacked)
	}
	n += s.delayed.h.len() + len(s.retry.h)
	// Sized once, not grown by doubling: a regrowth copies the whole
	// encoding so far, under the lock (200 MB at 5,000,000 queued), and
	// holds both copies. The last snapshot's bytes a message, with a
	// sixteenth to spare, guess the size; 40 until there is one.
	per := s.snapPerMsg
	if per == 0 {
		per = 40
	}
	//
	// A large one is outside the heap (offheap): on it, the encoding of
	// a backlog raised the collector's goal by its size while raft wrote
	// it, and its pages stayed resident long after (191 MB at 5,000,000
	// queued). Release gives them back.
	buf := offheap.Alloc(64<<10 + per*n + per*n/16)
	e := &enc{b: buf.Bytes(), collect: true, names: make([]queue.Body, 0, n)}
	s.encodeTo(e)
	if n > 0 {
		s.snapPerMsg = max(len(e.b)-64<<10, 0)/n + 1
	}
	return &lazySnapshot{parts: []part{{b: e.b}}, names: e.names, buf: buf}, nil
}

// part is a run of a snapshot: encoded bytes, or messages to encode.
type part struct {
	b    []byte
	msgs []queue.Message
}

// lazySnapshot is a snapshot whose messages are encoded as it is written.
type lazySnapshot struct {
	parts []part
	names []queue.Body // the named bodies, gathered as the state was encoded
	// format is the header's: the messages are encoded in it too.
	format uint64
	// buf holds parts[0].b when it was encoded at once (snapshot).
	buf *offheap.Buffer
}

// Release gives back the snapshot's buffer: it must not be written after.
func (l *lazySnapshot) Release() {
	l.buf.Free()
	l.parts, l.names = nil, nil
}

func (l *lazySnapshot) WriteTo(w io.Writer) (int64, error) {
	var total int64
	write := func(b []byte) error {
		n, err := w.Write(b)
		total += int64(n)
		return err
	}
	buf := &enc{b: make([]byte, 0, 64<<10), format: l.format}
	for _, p := range l.parts {
		if p.msgs == nil {
			if err := write(p.b); err != nil {
				return total, err
			}
			continue
		}
		for i := range p.msgs {
			encMessage(buf, &p.msgs[i])
			if len(buf.b) >= 64<<10 {
				if err := write(buf.b); err != nil {
					return total, err
				}
				buf.b = buf.b[:0]
			}
		}
		if err := write(buf.b); err != nil {
			return total, err
		}
		buf.b = buf.b[:0]
	}
	return total, nil
}

// Bodies lists the bodies the snapshot names, each once, in (Index, Pos)
// order: the node keeps them readable while the snapshot may be restored
// or sent to a follower. Inline bodies are in the snapshot itself.
func (l *lazySnapshot) Bodies() []queue.Body {
	out := l.names
	for _, p := range l.parts {
		for i := range p.msgs {
			if b := p.msgs[i].Body; b.Index != 0 {
				out = append(out, b)
			}
		}
	}
	slices.SortFunc(out, func(a, b queue.Body) int {
		if c := cmp.Compare(a.Index, b.Index); c != 0 {
			return c
		}
		return cmp.Compare(a.Pos, b.Pos)
	})
	return slices.CompactFunc(out, func(a, b queue.Body) bool { return a.Index == b.Index && a.Pos == b.Pos })
}

func (s *state) digest() [32]byte {
	e := &enc{b: make([]byte, 0, 4096), digest: true}
	s.encodeTo(e)
	return sha256.Sum256(e.b)
}

func (s *state) restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	return s.restoreBytes(b)
}

func (s *state) restoreBytes(b []byte) error {
	n, err := decodeState(b)
	if err != nil {
		return err
	}
	*s = *n
	return nil
}

func decodeState(b []byte) (*state, error) {
	if len(b) < len(snapMagic) || string(b[:len(snapMagic)]) != snapMagic {
		return nil, errCorrupt
	}
	d := &dec{b: b[len(snapMagic):]}
	version := d.u()
	if version < 1 || version > snapVersion {
		return nil, errors.New("fsm: unsupported snapshot version")
	}
	d.version = version
	s := &state{}
	s.init()
	s.index = d.u()
	s.clock = d.i()
	s.initialized = d.bo()
	if version >= 3 {
		s.tagFloor = d.u()
	}
	// Formats before 4 were written before the log had a level: level 1.
	// Format 3's floor is dropped: the binary that wrote it numbered by
	// the floor without a level to say so, and at level 1 a replica that
	// replays the same log from its start has no floor. Keeping it would
	// make the two number differently once the level is raised.
	s.level = 1
	if version < 4 {
		s.tagFloor = 0
	} else {
		switch l := d.u(); {
		case l > Protocol:
			return nil, fmt.Errorf("fsm: the snapshot is at protocol level %d, and this version applies up to %d: written by a newer version", l, Protocol)
		case l > 1:
			s.level = uint32(l)
		}
	}
	st := &s.stats
	for _, p := range []*uint64{&st.Published, &st.Routed, &st.Delivered, &st.Acked, &st.Requeued, &st.Expired, &st.DeadLettered, &st.Dropped, &st.Rejected, &st.Purged, &st.Refused} {
		*p = d.u()
	}
	if version >= bodyRefFormat {
		for i := range st.Deaths {
			st.Deaths[i][0] = d.u()
			st.Deaths[i][1] = d.u()
		}
	}
	for n := d.n(); n > 0 && d.err == nil; n-- {
		u := &user{name: d.s(), hash: d.by(), alg: d.s()}
		for t := d.n(); t > 0 && d.err == nil; t-- {
			u.tags = append(u.tags, d.s())
		}
		s.users[u.name] = u
	}
	for n := d.n(); n > 0 && d.err == nil; n-- {
		p := &proto.PermissionInfo{}
		d.msg(p)
		s.perms[p.GetUser()+"\x00"+p.GetVhost()] = p
	}
	consumers := map[string]*consumer{} // channel key \x00 tag
	for n := d.n(); n > 0 && d.err == nil; n-- {
		v := newVhost(d.s(), d.s())
		for xn := d.n(); xn > 0 && d.err == nil; xn-- {
			x := &exchange{name: d.s(), typ: d.s(), durable: d.bo(), autoDelete: d.bo(), intern: d.bo(), args: d.table()}
			x.via = restoredVia(x)
			for bn := d.n(); bn > 0 && d.err == nil; bn-- {
				x.bindings = append(x.bindings, &binding{dest: d.s(), toExchange: d.bo(), key: d.s(), args: d.table()})
			}
			v.exchanges[x.name] = x
		}
		for _, ps := range []map[string]*policy{v.policies, v.operator} {
			for pn := d.n(); pn > 0 && d.err == nil; pn-- {
				def := &proto.PolicySet{}
				d.msg(def)
				re, err := regexp.Compile(def.GetPattern())
				if err != nil {
					return nil, err
				}
				ps[def.GetName()] = &policy{def: def, re: re}
			}
		}
		s.vhosts[v.name] = v
		for qn := d.n(); qn > 0 && d.err == nil; qn-- {
			q := &queueState{vhost: v.name, name: d.s(), durable: d.bo(), exclusive: d.bo(), autoDelete: d.bo(), owner: d.s(), args: d.table()}
			q.hadConsumer = d.bo()
			q.lastUsed = d.i()
			q.rr = int(d.u())
			q.q.SetTable(s.meta)
			q.q.SetSeq(d.u())
			if version >= 5 {
				q.features = d.bo()
			}
			if version >= retryFormat {
				q.retryLevel = d.bo()
			}
			if r := restoreQueueArgs(q); r != nil {
				return nil, errCorrupt
			}
			q.policy, q.opPolicy = matchPolicies(v, q.name, "queues")
			var m queue.Message
			for mn := d.n(); mn > 0 && d.err == nil; mn-- {
				m = queue.Message{}
				decMessageInto(d, &m, true)
				q.q.PushBack(&m)
			}
			for cn := d.n(); cn > 0 && d.err == nil; cn-- {
				ref := &proto.ConsumerRef{}
				d.msg(ref)
				c := &consumer{ref: ref, q: q, ch: s.channel(ref.GetChannel()), noAck: d.bo(), exclusive: d.bo(), prefetch: uint32(d.u()), args: d.table()}
				if version >= 2 {
					c.credit = uint32(d.u())
				}
				c.ref.Channel = c.ch.ref
				prio, _ := consumerPriority(q, c.args) // accepted when it consumed
				q.addConsumer(c, prio)
				consumers[c.ch.key+"\x00"+ref.GetTag()] = c
			}
			v.queues[q.name] = q
			s.stats.Queues++
		}
	}
	for n := d.n(); n > 0 && d.err == nil; n-- {
		ref := &proto.ChannelRef{}
		d.msg(ref)
		ch := s.channel(ref)
		ch.nextTag = d.u()
		if version >= 6 {
			ch.settled = d.i()
		}
		for cn := d.n(); cn > 0 && d.err == nil; cn-- {
			_, _ = d.s(), d.s()
			c, ok := consumers[ch.key+"\x00"+d.s()]
			if !ok {
				return nil, errCorrupt
			}
			ch.consumers = append(ch.consumers, c)
		}
		for un := d.n(); un > 0 && d.err == nil; un-- {
			p := &pending{tag: d.u()}
			vh, qn, deleted := d.s(), d.s(), d.bo()
			if v, ok := s.vhosts[vh]; ok && !deleted {
				p.q = v.queues[qn]
			}
			if p.q == nil {
				p.q = &queueState{vhost: vh, name: qn, deleted: true}
			}
			if d.bo() {
				p.c = consumers[ch.key+"\x00"+d.s()]
				if p.c != nil {
					p.c.unacked++
				}
			}
			p.m = decMessage(d)
			if version >= 6 {
				p.at, p.held = d.i(), d.bo()
			}
			p.q.unacked++
			ch.unacked = append(ch.unacked, p)
		}
	}
	if version >= delayedFormat && !decDelayed(d, s) {
		return nil, errCorrupt
	}
	if version >= retryFormat && !decRetry(d, s) {
		return nil, errCorrupt
	}
	if version >= limitsFormat && !decLimits(d, s) {
		return nil, errCorrupt
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, errCorrupt
	}
	s.inline = d.inline
	return s, nil
}
