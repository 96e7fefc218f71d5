package fsm

import (
	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

func headerKeys(h *proto.Table, key string) []string {
	v, ok := tableGet(h, key)
	if !ok {
		return nil
	}
	if sv, ok := valueString(v); ok {
		return []string{sv}
	}
	var out []string
	for _, e := range v.GetArray().GetValues() {
		if sv, ok := valueString(e); ok {
			out = append(out, sv)
		}
	}
	return out
}

func withoutHeader(p *proto.Properties, key string) *proto.Properties {
	if _, ok := tableGet(p.GetHeaders(), key); !ok {
		return p
	}
	c := pb.Clone(p).(*proto.Properties)
	c.Headers.Fields = deleteFunc(c.Headers.Fields, func(f *proto.Field) bool { return f.GetKey() == key })
	return c
}

func (s *state) applyPublish(c *proto.Publish) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	x, ok := v.exchanges[c.GetExchange()]
	if !ok {
		return notFound("exchange", c.GetExchange(), c.GetVhost())
	}
	if x.intern {
		return refused(replycode.AccessRefused, "ACCESS_REFUSED - cannot publish to internal "+rs("exchange", x.name, c.GetVhost()))
	}
	msgTTL := int64(-1)
	if c.GetProperties() != nil && c.GetProperties().Expiration != nil {
		n, err := ttl.ParseExpiration(c.GetProperties().GetExpiration())
		if err != nil {
			return ttlRefusal(err)
		}
		msgTTL = n
	}
	props := c.GetProperties()
	keys := []string{c.GetRoutingKey()}
	keys = append(keys, headerKeys(props.GetHeaders(), "CC")...)
	bcc := headerKeys(props.GetHeaders(), "BCC")
	keys = append(keys, bcc...)
	props = withoutHeader(props, "BCC")
	s.stats.Published++
	rt := s.route(v, x, keys, props)
	targets := rt.queues
	res := &proto.Result{Routed: len(targets) > 0}
	body := queue.Body{Index: s.index, Pos: s.pos, Size: uint32(len(c.GetBody()))}
	if len(rt.held) > 0 {
		// An x-delayed-message exchange on the way holds the message
		// (apply_delayed.go).
		return s.publishDelayed(c, v, x, keys, props, bcc, body, rt, msgTTL)
	}
	if len(targets) == 0 {
		return res
	}
	s.publishCopies(targets, x.name, c.GetRoutingKey(), props, encodeProps(props), bcc, body, nil, msgTTL, res)
	return res
}

// publishCopies enqueues one copy of a published message in each target
// this machine holds; the targets placed in queue groups share one copy
// in the outbox (placement.go), which counts as routed.
func (s *state) publishCopies(targets []*queueState, xname, rk string, props *proto.Properties, enc []byte, bcc []string,
	body queue.Body, inline []byte, msgTTL int64, res *proto.Result) {
	held, placed := splitPlaced(targets)
	if len(placed) > 0 {
		m := &queue.Message{Exchange: xname, RoutingKey: rk, Props: enc, Body: body, Enqueued: s.clock, MsgTTL: msgTTL}
		m.SetBCC(bcc)
		if inline != nil {
			m.SetInline(inline)
		}
		setPropsFlags(m, props)
		s.toOutboxRouted(targets[0].vhost, placed, m, false)
	}
	for _, q := range held {
		if q.lastKey != rk {
			q.lastKey = rk
		}
		// x.name and q.lastKey equal what the command holds; sharing
		// them keeps one copy of each name for a whole backlog.
		m := &queue.Message{Exchange: xname, RoutingKey: q.lastKey, Props: enc,
			Body: body, Enqueued: s.clock, MsgTTL: msgTTL}
		m.SetBCC(bcc)
		if inline != nil {
			m.SetInline(inline)
		}
		setPropsFlags(m, props)
		if q.overflow() != "drop-head" && q.overLimit(1, m.Size()) {
			res.Rejected = true
			s.stats.Refused++
			if q.overflow() == "reject-publish-dlx" {
				s.deadLetter(q, m, ttl.ReasonMaxLen)
			}
			continue
		}
		s.stats.Routed++
		q.counts.published++
		s.enqueue(q, m, true)
	}
}

func (s *state) applyGet(c *proto.Get) *proto.Result {
	q, r := s.lookupQueue(c.GetVhost(), c.GetQueue(), &proto.ConnectionRef{Node: c.GetChannel().GetNode(), Connection: c.GetChannel().GetConnection()})
	if r != nil {
		return r
	}
	if r := elsewhere(q); r != nil {
		return r
	}
	q.lastUsed = s.clock
	for {
		m := q.q.PopFront()
		if m == nil {
			return &proto.Result{}
		}
		if ttl.Expired(m.Deadline, s.clock) {
			s.kill(q, m, ttl.ReasonExpired)
			continue
		}
		ch := s.channel(c.GetChannel())
		ch.nextTag++
		s.stats.Delivered++
		q.countDelivery(m, c.GetNoAck())
		if c.GetNoAck() {
			s.stats.Acked++
		} else {
			p := &unacked{tag: ch.nextTag, q: q, m: m}
			if s.atLeast(levelConsumerTimeout) {
				p.at = s.clock
			}
			ch.unacked = append(ch.unacked, p)
			q.unacked++
		}
		g := &proto.GetOk{DeliveryTag: ch.nextTag, Redelivered: m.Redelivered, Exchange: m.Exchange,
			RoutingKey: m.RoutingKey, MessageCount: uint32(q.q.Len()) + q.held(), Properties: deliveryProps(q, m), Group: s.groups.id}
		if b, ok := m.Inline(); ok {
			g.Body = b
		} else {
			g.BodyIndex, g.BodyPos = m.Body.Index, m.Body.Pos
		}
		return &proto.Result{Get: g}
	}
}

func (s *state) channel(ref *proto.ChannelRef) *channel {
	k := chanKey(ref)
	ch, ok := s.channels[k]
	if !ok {
		ch = &channel{key: k, ref: &proto.ChannelRef{Node: ref.GetNode(), Connection: ref.GetConnection(), Channel: ref.GetChannel()}}
		if s.atLeast(levelTagFloor) {
			ch.nextTag = s.tagFloor
		}
		s.channels[k] = ch
	}
	return ch
}

// deadLetter routes a message that died in q through q's dead-letter
// exchange; without one (or with a missing one) the message is dropped.
func (s *state) deadLetter(q *queueState, m *queue.Message, reason string) {
	dlx, ok := q.dlx()
	if s.atLeast(levelDeaths) {
		for i, r := range DeathReasons {
			if r == reason {
				s.stats.Deaths[i][boolIndex(ok)]++
			}
		}
		if ok {
			q.counts.deadLettered++
		}
	}
	if !ok {
		return
	}
	v := s.vhosts[q.vhost]
	x, held := v.exchanges[dlx]
	if !held && s.groups.id == 0 {
		// No such exchange: dropped. A queue group routes on no
		// exchange (groups.go): there the message leaves through the
		// outbox.
		return
	}
	// A queue group's log may hold a vhost's default exchanges (its
	// VhostPut made them), never its bindings: its dead letters are
	// routed on the metadata group's.
	held = held && s.groups.id == 0
	old := m.Properties()
	deaths := readDeaths(old.GetHeaders())
	keys := append([]string{m.RoutingKey}, headerKeys(old.GetHeaders(), "CC")...)
	keys = append(keys, m.BCC()...)
	d := ttl.Death{Queue: q.name, Reason: reason, Exchange: m.Exchange, RoutingKeys: keys, TimeSec: s.clock / 1000,
		OriginalExpiration: old.GetExpiration()}
	deaths = ttl.RecordDeath(deaths, d)
	props := old
	if props == nil {
		props = &proto.Properties{}
	}
	props.Expiration = nil
	if props.Headers == nil {
		props.Headers = &proto.Table{}
	}
	setHeader(props.Headers, "x-death", deathsValue(deaths))
	if _, ok := tableGet(props.Headers, "x-first-death-reason"); !ok {
		setHeader(props.Headers, "x-first-death-reason", longstr(reason))
		setHeader(props.Headers, "x-first-death-queue", longstr(q.name))
		setHeader(props.Headers, "x-first-death-exchange", longstr(m.Exchange))
	}
	rk := keys
	if k, ok := q.dlrk(); ok {
		rk = []string{k}
	}
	enc := encodeProps(props)
	if !held {
		s.toOutbox(q.vhost, dlx, rk, deadLetterCopy(dlx, rk[0], props, enc, m, s.clock))
		return
	}
	s.routeDeadLetter(v, x, rk, props, enc, deaths, m)
}

// routeDeadLetter routes dead letter m through exchange x of v with keys
// rk: a delayed exchange on the way holds it, the queues reached take
// their copies (deadLetterCopies).
func (s *state) routeDeadLetter(v *vhost, x *exchange, rk []string, props *proto.Properties, enc []byte, deaths []ttl.Death, m *queue.Message) {
	rt := s.route(v, x, rk, props)
	if len(rt.held) > 0 {
		// Dead-lettered into an x-delayed-message exchange with an
		// x-delay header: it waits there, as the plugin's would.
		s.holdDeadLettered(v, m, rk[0], enc, rt)
	}
	s.deadLetterCopies(rt.queues, x.name, rk[0], props, enc, deaths, m)
}

// deadLetterCopy is the copy of m a dead letter enqueues, its body
// named (or held) as m's.
func deadLetterCopy(dlx, rk string, props *proto.Properties, enc []byte, m *queue.Message, now int64) *queue.Message {
	nm := &queue.Message{Exchange: dlx, RoutingKey: rk, Props: enc, Body: m.Body, Enqueued: now, MsgTTL: -1}
	if b, ok := m.Inline(); ok {
		nm.SetInline(b)
	}
	setPropsFlags(nm, props)
	return nm
}

// deadLetterCopies enqueues a dead letter in each target it has not died
// in before (a cycle); a queue refusing it for overflow does not
// dead-letter it again.
func (s *state) deadLetterCopies(targets []*queueState, dlx, rk string, props *proto.Properties, enc []byte, deaths []ttl.Death,
	m *queue.Message) {
	held, placed := splitPlaced(targets)
	// The placed targets share one copy in the outbox (placement.go);
	// the cycle is checked here, and again by their groups.
	placed = deleteFunc(placed, func(q string) bool { return ttl.Cycle(deaths, q) })
	if len(placed) > 0 {
		s.toOutboxRouted(targets[0].vhost, placed, deadLetterCopy(dlx, rk, props, enc, m, s.clock), true)
	}
	for _, t := range held {
		if ttl.Cycle(deaths, t.name) {
			continue
		}
		nm := deadLetterCopy(dlx, rk, props, enc, m, s.clock)
		if t.overflow() != "drop-head" && t.overLimit(1, nm.Size()) {
			s.stats.Refused++
			continue
		}
		s.stats.DeadLettered++
		s.enqueue(t, nm, true)
	}
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// encodeProps is the form messages hold their properties in (queue.Message
// Props): deterministic, so every replica holds the same bytes.
func encodeProps(p *proto.Properties) []byte {
	if p == nil {
		return nil
	}
	b, _ := pb.MarshalOptions{Deterministic: true}.Marshal(p)
	if len(b) == 0 {
		return nil
	}
	return b
}

// setPropsFlags copies into m what the state machine decides with from
// its properties: the priority lane and whether it is persistent.
func setPropsFlags(m *queue.Message, p *proto.Properties) {
	m.Priority = uint8(min(p.GetPriority(), 255))
	m.Persistent = p.GetDeliveryMode() == 2
}

func setHeader(t *proto.Table, key string, v *proto.Value) {
	for _, f := range t.Fields {
		if f.GetKey() == key {
			f.Value = v
			return
		}
	}
	t.Fields = append(t.Fields, &proto.Field{Key: key, Value: v})
}

func readDeaths(h *proto.Table) []ttl.Death {
	v, ok := tableGet(h, "x-death")
	if !ok {
		return nil
	}
	var out []ttl.Death
	for _, e := range v.GetArray().GetValues() {
		t := e.GetTable()
		if t == nil {
			continue
		}
		var d ttl.Death
		for _, f := range t.GetFields() {
			fv := f.GetValue()
			switch f.GetKey() {
			case "count":
				if n, ok := valueAny(fv).(int64); ok {
					d.Count = n
				}
			case "reason":
				d.Reason, _ = valueString(fv)
			case "queue":
				d.Queue, _ = valueString(fv)
			case "exchange":
				d.Exchange, _ = valueString(fv)
			case "original-expiration":
				d.OriginalExpiration, _ = valueString(fv)
			case "time":
				d.TimeSec = fv.GetTimestamp()
			case "routing-keys":
				for _, k := range fv.GetArray().GetValues() {
					if sv, ok := valueString(k); ok {
						d.RoutingKeys = append(d.RoutingKeys, sv)
					}
				}
			}
		}
		out = append(out, d)
	}
	return out
}

func deathsValue(ds []ttl.Death) *proto.Value {
	arr := &proto.Array{}
	for _, d := range ds {
		keys := &proto.Array{}
		for _, k := range d.RoutingKeys {
			keys.Values = append(keys.Values, longstr(k))
		}
		t := &proto.Table{}
		t.Fields = append(t.Fields, &proto.Field{Key: "count", Value: &proto.Value{Kind: &proto.Value_Int64{Int64: d.Count}}})
		t.Fields = append(t.Fields, &proto.Field{Key: "exchange", Value: longstr(d.Exchange)})
		if d.OriginalExpiration != "" {
			t.Fields = append(t.Fields, &proto.Field{Key: "original-expiration", Value: longstr(d.OriginalExpiration)})
		}
		t.Fields = append(t.Fields, &proto.Field{Key: "queue", Value: longstr(d.Queue)})
		t.Fields = append(t.Fields, &proto.Field{Key: "reason", Value: longstr(d.Reason)})
		t.Fields = append(t.Fields, &proto.Field{Key: "routing-keys", Value: &proto.Value{Kind: &proto.Value_Array{Array: keys}}})
		t.Fields = append(t.Fields, &proto.Field{Key: "time", Value: &proto.Value{Kind: &proto.Value_Timestamp{Timestamp: d.TimeSec}}})
		arr.Values = append(arr.Values, &proto.Value{Kind: &proto.Value_Table{Table: t}})
	}
	return &proto.Value{Kind: &proto.Value_Array{Array: arr}}
}
