package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"unsafe"

	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

// snapMagic opens every snapshot; the format version follows it
// (levels.go), then the records in a fixed order (counters, users,
// permissions, vhosts with exchanges, policies and queues, channels, the
// delayed and the retried messages, the vhosts' limits, the group's id,
// outbox and hand-offs, the queue groups, whether placement is on). Every map is
// written in sorted key order. Each field a format added is written and
// read under one rule: has(format).
const snapMagic = "RMQS"

// enc encodes a snapshot. With capture, the messages of queues and of
// delayed exchanges are captured, not encoded: parts holds the encoded
// runs between them, and lazySnapshot encodes them as it is written.
type enc struct {
	b []byte
	// capture is the capture the queues' messages are viewed in
	// (state.snapshot); nil encodes them at once.
	capture *queue.Capture
	parts   []part
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

func (e *enc) version() format {
	if e.format == 0 {
		return snapVersion
	}
	return e.format
}

// has reports whether the format written holds what f added.
func (e *enc) has(f format) bool { return e.version() >= f }

func (e *enc) message(m *queue.Message) { encMessage(e, m) }

// later ends the run of bytes encoded so far and puts p, a captured run
// of messages, after it.
func (e *enc) later(p part) {
	e.flushBytes()
	e.parts = append(e.parts, p)
}

func (e *enc) flushBytes() {
	if e.capture != nil && len(e.b) > 0 {
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

// encodeTo writes the state to e; with e.capture, the messages of queues
// and delayed exchanges are captured for a later encoding instead (see
// lazySnapshot).
func (s *state) encodeTo(e *enc) {
	if e.format == 0 {
		e.format = formatFor(s.level)
	}
	e.b = append(e.b, snapMagic...)
	e.u(e.version())
	e.u(s.index)
	e.i(s.clock)
	e.bo(s.initialized)
	if e.has(formatTagFloor) {
		e.u(s.tagFloor)
	}
	if e.has(formatLevel) {
		e.u(uint64(s.level))
	}
	encStats(e, &s.stats)
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
		encVhost(e, s.vhosts[vk])
	}
	e.u(uint64(len(s.channels)))
	for _, ck := range sortedKeys(s.channels) {
		encChannel(e, s.channels[ck])
	}
	if e.has(formatDelayed) {
		encDelayed(e, s)
	}
	if e.has(formatRetry) {
		encRetry(e, &s.retry)
	}
	if e.has(formatVhostLimits) {
		encLimits(e, s)
	}
	if e.has(formatGroups) {
		encGroups(e, &s.groups)
	}
	if e.has(formatQueueGroups) {
		encQueueGroups(e, s)
	}
	if e.has(formatPlacement) {
		e.bo(s.placing)
	}
	e.flushBytes()
}

func encStats(e *enc, st *Stats) {
	for _, v := range []uint64{st.Published, st.Routed, st.Delivered, st.Acked, st.Requeued, st.Expired, st.DeadLettered, st.Dropped, st.Rejected, st.Purged, st.Refused} {
		e.u(v)
	}
	if e.has(formatBodyRefs) {
		for _, r := range st.Deaths {
			e.u(r[0])
			e.u(r[1])
		}
	}
}

func encVhost(e *enc, v *vhost) {
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
		encQueue(e, v.queues[qk])
	}
	if e.has(formatLeases) {
		e.u(uint64(len(v.ended)))
		for _, name := range sortedKeys(v.ended) {
			e.s(name)
			e.u(v.ended[name])
		}
	}
}

func encQueue(e *enc, q *queueState) {
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
	if e.has(formatReturns) {
		e.bo(q.features)
	}
	if e.has(formatRetry) {
		e.bo(q.retryLevel)
	}
	if e.has(formatPlacement) {
		e.s(q.group)
	}
	if e.has(formatLeases) {
		e.u(q.placedAt)
	}
	e.u(uint64(q.q.Len()))
	if e.capture != nil {
		e.later(part{q: q.q.Capture(e.capture)})
	} else {
		q.q.Each(func(m *queue.Message) { e.message(m) })
	}
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

func encChannel(e *enc, ch *channel) {
	e.msg(ch.ref)
	e.u(ch.nextTag)
	if e.has(formatSettled) {
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
		if e.has(formatSettled) {
			e.i(p.at)
			e.bo(p.held)
		}
	}
}

func encMessage(e *enc, m *queue.Message) {
	e.s(m.Exchange)
	e.s(m.RoutingKey)
	if e.has(formatBodyRefs) {
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
	if e.has(formatReturns) {
		e.i(m.Returns)
	}
	if e.has(formatRetry) {
		e.i(m.Failures())
	}
}

type dec struct {
	b       []byte
	err     error
	version format
}

// has reports whether the format read holds what f added.
func (d *dec) has(f format) bool { return d.version >= f }

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
	if d.has(formatBodyRefs) {
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
	if d.has(formatReturns) {
		m.Returns = d.i()
	}
	if d.has(formatRetry) {
		m.SetFailures(d.i())
	}
}

func decodeState(b []byte) (*state, error) {
	if len(b) < len(snapMagic) || string(b[:len(snapMagic)]) != snapMagic {
		return nil, errCorrupt
	}
	d := &dec{b: b[len(snapMagic):]}
	d.version = d.u()
	if d.version < formatFirst || d.version > snapVersion {
		return nil, errors.New("fsm: unsupported snapshot version")
	}
	s := &state{}
	s.init()
	s.index = d.u()
	s.clock = d.i()
	s.initialized = d.bo()
	if d.has(formatTagFloor) {
		s.tagFloor = d.u()
	}
	// Formats before formatLevel were written before the log had a
	// level: levelFirst. Format 3's floor is dropped: the binary that
	// wrote it numbered by the floor without a level to say so, and at
	// level 1 a replica that replays the same log from its start has no
	// floor. Keeping it would make the two number differently once the
	// level is raised.
	s.level = levelFirst
	if !d.has(formatLevel) {
		s.tagFloor = 0
	} else {
		switch l := d.u(); {
		case l > Protocol:
			return nil, fmt.Errorf("fsm: the snapshot is at protocol level %d, and this version applies up to %d: written by a newer version", l, Protocol)
		case l > uint64(levelFirst):
			s.level = uint32(l)
		}
	}
	decStats(d, &s.stats)
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
		if err := decVhost(d, s, consumers); err != nil {
			return nil, err
		}
	}
	for n := d.n(); n > 0 && d.err == nil; n-- {
		if err := decChannel(d, s, consumers); err != nil {
			return nil, err
		}
	}
	if d.has(formatDelayed) && !decDelayed(d, s) {
		return nil, errCorrupt
	}
	if d.has(formatRetry) && !decRetry(d, s) {
		return nil, errCorrupt
	}
	if d.has(formatVhostLimits) && !decLimits(d, s) {
		return nil, errCorrupt
	}
	if d.has(formatGroups) && !decGroups(d, &s.groups) {
		return nil, errCorrupt
	}
	if d.has(formatQueueGroups) && !decQueueGroups(d, s) {
		return nil, errCorrupt
	}
	if d.has(formatPlacement) {
		s.placing = d.bo()
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, errCorrupt
	}
	return s, nil
}

func decStats(d *dec, st *Stats) {
	for _, p := range []*uint64{&st.Published, &st.Routed, &st.Delivered, &st.Acked, &st.Requeued, &st.Expired, &st.DeadLettered, &st.Dropped, &st.Rejected, &st.Purged, &st.Refused} {
		*p = d.u()
	}
	if d.has(formatBodyRefs) {
		for i := range st.Deaths {
			st.Deaths[i][0] = d.u()
			st.Deaths[i][1] = d.u()
		}
	}
}

// decVhost reads what encVhost wrote; the consumers it reads go into
// consumers by channel key and tag, for decChannel.
func decVhost(d *dec, s *state, consumers map[string]*consumer) error {
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
				return err
			}
			ps[def.GetName()] = &policy{def: def, re: re}
		}
	}
	s.vhosts[v.name] = v
	for qn := d.n(); qn > 0 && d.err == nil; qn-- {
		if err := decQueue(d, s, v, consumers); err != nil {
			return err
		}
	}
	if d.has(formatLeases) {
		for en := d.n(); en > 0 && d.err == nil; en-- {
			if v.ended == nil {
				v.ended = map[string]uint64{}
			}
			name := d.s()
			v.ended[name] = d.u()
		}
	}
	return nil
}

func decQueue(d *dec, s *state, v *vhost, consumers map[string]*consumer) error {
	q := &queueState{queueIdentity: queueIdentity{vhost: v.name, name: d.s(), durable: d.bo(), exclusive: d.bo(), autoDelete: d.bo(), owner: d.s()}, args: d.table()}
	q.hadConsumer = d.bo()
	q.lastUsed = d.i()
	q.rr = int(d.u())
	q.q.SetTable(s.meta)
	q.q.SetSeq(d.u())
	if d.has(formatReturns) {
		q.features = d.bo()
	}
	if d.has(formatRetry) {
		q.retryLevel = d.bo()
	}
	var group string
	if d.has(formatPlacement) {
		group = d.s()
	}
	if d.has(formatLeases) {
		q.placedAt = d.u()
	}
	if r := restoreQueueArgs(q); r != nil {
		return errCorrupt
	}
	q.policy, q.opPolicy = matchPolicies(v, q.name, "queues")
	var m queue.Message
	for mn := d.n(); mn > 0 && d.err == nil; mn-- {
		m = queue.Message{}
		decMessageInto(d, &m, true)
		q.q.PushBack(&m)
	}
	s.markTimed(q)
	s.markLeased(q)
	for cn := d.n(); cn > 0 && d.err == nil; cn-- {
		ref := &proto.ConsumerRef{}
		d.msg(ref)
		c := &consumer{ref: ref, q: q, ch: s.channel(ref.GetChannel()), noAck: d.bo(), exclusive: d.bo(), prefetch: uint32(d.u()), args: d.table()}
		if d.has(formatCredit) {
			c.credit = uint32(d.u())
		}
		c.ref.Channel = c.ch.ref
		prio, _ := consumerPriority(q, c.args) // accepted when it consumed
		q.addConsumer(c, prio)
		consumers[c.ch.key+"\x00"+ref.GetTag()] = c
	}
	v.queues[q.name] = q
	s.stats.Queues++
	s.place(q, group)
	return nil
}

func decChannel(d *dec, s *state, consumers map[string]*consumer) error {
	ref := &proto.ChannelRef{}
	d.msg(ref)
	ch := s.channel(ref)
	ch.nextTag = d.u()
	if d.has(formatSettled) {
		ch.settled = d.i()
	}
	for cn := d.n(); cn > 0 && d.err == nil; cn-- {
		_, _ = d.s(), d.s()
		c, ok := consumers[ch.key+"\x00"+d.s()]
		if !ok {
			return errCorrupt
		}
		ch.consumers = append(ch.consumers, c)
	}
	for un := d.n(); un > 0 && d.err == nil; un-- {
		p := &unacked{tag: d.u()}
		vh, qn, deleted := d.s(), d.s(), d.bo()
		if v, ok := s.vhosts[vh]; ok && !deleted {
			p.q = v.queues[qn]
		}
		if p.q == nil {
			p.q = &queueState{queueIdentity: queueIdentity{vhost: vh, name: qn}, deleted: true}
		}
		if d.bo() {
			p.c = consumers[ch.key+"\x00"+d.s()]
			if p.c != nil {
				p.c.unacked++
			}
		}
		p.m = decMessage(d)
		if d.has(formatSettled) {
			p.at, p.held = d.i(), d.bo()
		}
		p.q.unacked++
		ch.unacked = append(ch.unacked, p)
	}
	return nil
}
