package fsm

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// groupState is what a log's machine keeps as one group among several
// (fsm/DESIGN.md, "Queue groups"), from level 13 on: all of it state, in
// the snapshot and the digest.
type groupState struct {
	// id is this group's (GroupInit); 0 for the metadata group, which is
	// also the only group of a cluster without queue groups. A machine
	// with an id holds queues only: a dead letter into an exchange it
	// does not hold leaves through the outbox.
	id uint32
	// out holds the messages waiting to be handed to other groups.
	out outbox
	// in is, per source group, the outbox keys applied by HandOff.
	in map[uint32]*applied
}

// outbox is the messages a group hands off, in ascending keys.
type outbox struct {
	// seq is the last key given: keys are dense (1, 2, 3...) in log
	// order, so a target keeps a floor per source, not every key.
	seq     uint64
	entries []*outEntry
}

// outEntry is a message leaving the group: the leader routes it through
// exchange with keys, on the metadata group's bindings, and hands it to
// the groups of the queues it reaches.
type outEntry struct {
	key uint64
	// index is the log index of the entry that put it here.
	index    uint64
	vhost    string
	exchange string
	keys     []string
	// m is the message as the targets enqueue it: m.Exchange and
	// m.RoutingKey are exchange and keys[0], its properties hold the
	// x-death record, its body is named in this group's log.
	m *queue.Message
	// deadLettered: the targets check dead-letter cycles.
	deadLettered bool
	// queues are the target queues when the entry is pre-routed (a copy
	// the metadata log routed to queues placed in queue groups,
	// placement.go): the leader hands it to each one's group without
	// routing it. Empty for a dead letter leaving a queue group.
	queues []string
}

// applied is the HandOff keys applied from one source group: every key
// up to floor, and those above it (above, ascending), which only a
// hand-off out of order leaves.
type applied struct {
	floor uint64
	above []uint64
}

// has reports whether key was applied.
func (a *applied) has(key uint64) bool {
	if key <= a.floor {
		return true
	}
	_, ok := slices.BinarySearch(a.above, key)
	return ok
}

// add records key, which has not been applied, and moves the floor over
// the keys now contiguous with it.
func (a *applied) add(key uint64) {
	if key != a.floor+1 {
		i, _ := slices.BinarySearch(a.above, key)
		a.above = slices.Insert(a.above, i, key)
		return
	}
	a.raise(key)
}

// raise moves the floor to at least f, and over the keys above it now
// contiguous with it. The source's acknowledged prefix raises it past the
// keys it never sent here (routed to other groups, or nowhere), so above
// holds only keys beyond that prefix, at most the source's outbox.
func (a *applied) raise(f uint64) {
	a.floor = max(a.floor, f)
	n := 0
	for n < len(a.above) && a.above[n] <= a.floor+1 {
		a.floor = max(a.floor, a.above[n])
		n++
	}
	a.above = slices.Delete(a.above, 0, n)
}

// notGrouped refuses a group command below levelGroups: the kinds are
// new, but a state below that level must hold nothing of groups, since
// it is written in a format without them (formatFor).
func (s *state) notGrouped() *proto.Result {
	if s.atLeast(levelGroups) {
		return nil
	}
	return refused(replycode.NotImplemented, fmt.Sprintf("NOT_IMPLEMENTED - queue groups need protocol level %d; the log is at %d", levelGroups, s.level))
}

func (s *state) applyGroupInit(c *proto.GroupInit) *proto.Result {
	if r := s.notGrouped(); r != nil {
		return r
	}
	switch id := c.GetGroup(); {
	case id == 0:
		return malformed("group 0").Result()
	case s.groups.id != 0 && s.groups.id != id:
		return refused(replycode.PreconditionFailed, fmt.Sprintf("PRECONDITION_FAILED - this log is group %d's, not group %d's", s.groups.id, id))
	default:
		s.groups.id = id
	}
	return &proto.Result{}
}

// applyEnqueue puts a message into the queues a routing node resolved:
// each takes its copy as from a routed publish (publishCopies).
func (s *state) applyEnqueue(c *proto.Enqueue) *proto.Result {
	if r := s.notGrouped(); r != nil {
		return r
	}
	return s.enqueueInto(c, false)
}

// enqueueInto puts the message of c into its queues of this group, the
// queues no longer held skipped, each named once. A dead letter is
// enqueued as deadLetter enqueues one routed in the group.
func (s *state) enqueueInto(c *proto.Enqueue, deadLettered bool) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	msgTTL := int64(-1)
	props := c.GetProperties()
	if props != nil && props.Expiration != nil {
		n, err := ttl.ParseExpiration(props.GetExpiration())
		if err != nil {
			return ttlRefusal(err)
		}
		msgTTL = n
	}
	bcc := headerKeys(props.GetHeaders(), "BCC")
	props = withoutHeader(props, "BCC")
	s.mark++
	var targets []*queueState
	for _, name := range c.GetQueues() {
		if q, ok := v.queues[name]; ok && q.mark != s.mark {
			q.mark = s.mark
			targets = append(targets, q)
		}
	}
	body := queue.Body{Index: s.index, Pos: s.pos, Size: uint32(len(c.GetBody()))}
	res := &proto.Result{Routed: len(targets) > 0}
	if deadLettered {
		s.deadLetterCopies(targets, c.GetExchange(), c.GetRoutingKey(), props, encodeProps(props), readDeaths(props.GetHeaders()), &queue.Message{Body: body})
		return res
	}
	s.stats.Published++
	s.publishCopies(targets, c.GetExchange(), c.GetRoutingKey(), props, encodeProps(props), bcc, body, nil, msgTTL, res)
	return res
}

// applyHandOff applies an outbox entry of a source group once: a key
// applied before (a second leader's proposal, a replay of the source's
// outbox after its restore) changes nothing, and so does one the source
// acknowledged (a deposed leader's proposal from a stale state).
func (s *state) applyHandOff(c *proto.HandOff) *proto.Result {
	if r := s.notGrouped(); r != nil {
		return r
	}
	if c.GetKey() == 0 || c.GetMessage() == nil {
		return malformed("hand-off without its key or message").Result()
	}
	a := s.groups.in[c.GetSourceGroup()]
	if a == nil {
		a = &applied{}
		if s.groups.in == nil {
			s.groups.in = map[uint32]*applied{}
		}
		s.groups.in[c.GetSourceGroup()] = a
	}
	a.raise(c.GetDone())
	if a.has(c.GetKey()) {
		return &proto.Result{}
	}
	a.add(c.GetKey())
	if keys := c.GetRouteKeys(); len(keys) > 0 && s.atLeast(levelHandOffRoute) {
		s.routeHandOff(c.GetMessage(), keys)
		return &proto.Result{}
	}
	r := s.enqueueInto(c.GetMessage(), c.GetDeadLettered())
	if r.GetCode() != 0 {
		// The vhost went away: the message is dropped, as a dead letter
		// into a deleted exchange is, and the key stays applied.
		return &proto.Result{}
	}
	return r
}

// routeHandOff routes a dead letter handed off by another group through
// its exchange with keys, on this log's bindings, as one dying here is
// routed: a delayed exchange on its way holds it here (a queue group
// holds no exchanges, so it cannot), the queues this log holds take
// their copies, and those placed in queue groups leave through the
// outbox. A vhost or exchange gone by now drops it, as RabbitMQ drops a
// dead letter into an exchange that does not exist.
func (s *state) routeHandOff(c *proto.Enqueue, keys []string) {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return
	}
	x, ok := v.exchanges[c.GetExchange()]
	if !ok {
		return
	}
	props := c.GetProperties()
	m := &queue.Message{Body: queue.Body{Index: s.index, Pos: s.pos, Size: uint32(len(c.GetBody()))}}
	s.routeDeadLetter(v, x, keys, props, encodeProps(props), readDeaths(props.GetHeaders()), m)
}

// applyHandOffDone forgets the outbox entries up to the key.
func (s *state) applyHandOffDone(c *proto.HandOffDone) *proto.Result {
	if r := s.notGrouped(); r != nil {
		return r
	}
	es := s.groups.out.entries
	n := s.groups.out.after(c.GetUpTo())
	clear(es[:n])
	s.groups.out.entries = es[n:]
	return &proto.Result{MessageCount: uint32(n)}
}

// done is the acknowledged prefix: keys are dense and leave only by
// HandOffDone, so the entries are exactly the keys above it.
func (o *outbox) done() uint64 { return o.seq - uint64(len(o.entries)) }

// after is the position of the first entry whose key is above key.
func (o *outbox) after(key uint64) int {
	n, _ := slices.BinarySearchFunc(o.entries, key, func(e *outEntry, k uint64) int { return cmp.Compare(e.key, k) })
	if n < len(o.entries) && o.entries[n].key == key {
		n++
	}
	return n
}

// toOutbox keeps a message that dies into an exchange this queue group
// does not hold, for its leader to route on the metadata group's
// bindings.
func (s *state) toOutbox(vhost, exchange string, keys []string, m *queue.Message) {
	s.groups.out.seq++
	s.groups.out.entries = append(s.groups.out.entries, &outEntry{key: s.groups.out.seq, index: s.index,
		vhost: vhost, exchange: exchange, keys: keys, m: m, deadLettered: true})
}

// OutboxEntry is a message a group hands off: Machine.Outbox lists them.
// The leader routes it through Exchange with RoutingKeys on the metadata
// group's bindings, proposes to each group holding queues it reaches a
// HandOff (HandOffCommand) with the body it reads by Body (ReadBody, as a
// delivery's), and once every such group committed, HandOffDone up to Key
// in this group.
type OutboxEntry struct {
	Key         uint64
	Index       uint64 // the log index that put it in the outbox
	Vhost       string
	Exchange    string
	RoutingKeys []string
	Properties  *proto.Properties
	// Body names the body in this group's log; InlineBody holds it when
	// the state does (a body restored inline).
	Body         queue.Body
	InlineBody   []byte
	DeadLettered bool
	// Done is the outbox's acknowledged prefix when it was listed: every
	// key up to it left the outbox by HandOffDone. The HandOff carries it.
	Done uint64
	// Queues, when set, are the target queues the entry was routed to
	// already (a copy the metadata log routed to queues placed in queue
	// groups): the leader hands it to each one's group as it is, without
	// routing it through Exchange. Properties then hold the BCC header
	// the message was published with, which the target takes out as a
	// publish's.
	Queues []string
}

// HandOffCommand is the HandOff that puts e into queues of a target
// group, from source (this group's id), with the body's bytes.
func (e *OutboxEntry) HandOffCommand(source uint32, body []byte, queues []string) *proto.Command {
	return e.handOff(source, body, queues, nil)
}

// RouteHandOffCommand is the HandOff that gives e, with the body's bytes,
// to the metadata group to route there (HandOffRouteLevel): what a
// delayed exchange on its way holds waits in that log.
func (e *OutboxEntry) RouteHandOffCommand(source uint32, body []byte) *proto.Command {
	return e.handOff(source, body, nil, slices.Clone(e.RoutingKeys))
}

func (e *OutboxEntry) handOff(source uint32, body []byte, queues, routeKeys []string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_HandOff{HandOff: &proto.HandOff{SourceGroup: source, Key: e.Key, Done: e.Done,
		DeadLettered: e.DeadLettered, Message: &proto.Enqueue{Vhost: e.Vhost, Exchange: e.Exchange,
			RoutingKey: e.RoutingKeys[0], Properties: e.Properties, Body: body, Queues: queues}, RouteKeys: routeKeys}}}
}

// Outbox lists at most limit (0: all) outbox entries with keys above
// after, in key order.
func (m *Machine) Outbox(after uint64, limit int) []OutboxEntry {
	var out []OutboxEntry
	for _, e := range m.groups.out.entries[m.groups.out.after(after):] {
		if limit > 0 && len(out) == limit {
			break
		}
		o := OutboxEntry{Key: e.key, Index: e.index, Vhost: e.vhost, Exchange: e.exchange,
			RoutingKeys: slices.Clone(e.keys), Properties: e.m.Properties(), Body: e.m.Body, DeadLettered: e.deadLettered,
			Done: m.groups.out.done(), Queues: slices.Clone(e.queues)}
		if bcc := e.m.BCC(); len(bcc) > 0 {
			o.Properties = withBCC(o.Properties, bcc)
		}
		if b, ok := e.m.Inline(); ok {
			o.InlineBody = b
		}
		out = append(out, o)
	}
	return out
}

// Route is where a message sent to exchange of vhost with keys (routing
// key, CC and BCC) and props goes on this machine's exchanges and
// bindings: the queues it reaches, in the order a routed publish takes
// them, and held when a delayed exchange on the way would hold it (an
// x-delay the way cannot carry). ok is false for a vhost or exchange the
// machine does not hold. A group's leader routes its outbox with it on
// the metadata group's machine; it changes no state (the routing marks it
// moves are none).
func (m *Machine) Route(vhost, exchange string, keys []string, props *proto.Properties) (queues []string, held, ok bool) {
	v, ok := m.vhosts[vhost]
	if !ok {
		return nil, false, false
	}
	x, ok := v.exchanges[exchange]
	if !ok {
		return nil, false, false
	}
	rt := m.route(v, x, keys, props)
	for _, q := range rt.queues {
		queues = append(queues, q.name)
	}
	return queues, len(rt.held) > 0, true
}

// OutboxLen is the number of messages waiting in the outbox.
func (m *Machine) OutboxLen() int { return len(m.groups.out.entries) }

// Group is this log's group id (GroupInit), 0 for the metadata group.
func (m *Machine) Group() uint32 { return m.groups.id }

// HandedOff reports whether a HandOff of source's key was applied here.
func (m *Machine) HandedOff(source uint32, key uint64) bool {
	a := m.groups.in[source]
	return a != nil && a.has(key)
}

func encGroups(e *enc, g *groupState) {
	e.u(uint64(g.id))
	e.u(g.out.seq)
	e.u(uint64(len(g.out.entries)))
	for _, o := range g.out.entries {
		e.u(o.key)
		e.u(o.index)
		e.s(o.vhost)
		e.s(o.exchange)
		e.u(uint64(len(o.keys)))
		for _, k := range o.keys {
			e.s(k)
		}
		e.bo(o.deadLettered)
		e.message(o.m)
		if e.has(formatPlacement) {
			e.u(uint64(len(o.queues)))
			for _, q := range o.queues {
				e.s(q)
			}
		}
	}
	srcs := make([]uint32, 0, len(g.in))
	for k := range g.in {
		srcs = append(srcs, k)
	}
	slices.Sort(srcs)
	e.u(uint64(len(srcs)))
	for _, k := range srcs {
		a := g.in[k]
		e.u(uint64(k))
		e.u(a.floor)
		e.u(uint64(len(a.above)))
		for _, x := range a.above {
			e.u(x)
		}
	}
}

func decGroups(d *dec, g *groupState) bool {
	g.id = uint32(d.u())
	g.out.seq = d.u()
	for n := d.n(); n > 0 && d.err == nil; n-- {
		o := &outEntry{key: d.u(), index: d.u(), vhost: d.s(), exchange: d.s()}
		for k := d.n(); k > 0 && d.err == nil; k-- {
			o.keys = append(o.keys, d.s())
		}
		o.deadLettered = d.bo()
		o.m = decMessage(d)
		if d.has(formatPlacement) {
			for k := d.n(); k > 0 && d.err == nil; k-- {
				o.queues = append(o.queues, d.s())
			}
		}
		if len(o.keys) == 0 || o.key > g.out.seq || (len(g.out.entries) > 0 && o.key <= g.out.entries[len(g.out.entries)-1].key) {
			return false
		}
		g.out.entries = append(g.out.entries, o)
	}
	for n := d.n(); n > 0 && d.err == nil; n-- {
		src := uint32(d.u())
		a := &applied{floor: d.u()}
		for k := d.n(); k > 0 && d.err == nil; k-- {
			a.above = append(a.above, d.u())
		}
		if g.in == nil {
			g.in = map[uint32]*applied{}
		}
		if _, dup := g.in[src]; dup {
			return false
		}
		g.in[src] = a
	}
	return d.err == nil
}

// withBCC is props (a copy of its own) with a BCC header naming keys:
// the form a publish carries them in, which Enqueue takes out again.
func withBCC(props *proto.Properties, keys []string) *proto.Properties {
	if props == nil {
		props = &proto.Properties{}
	}
	if props.Headers == nil {
		props.Headers = &proto.Table{}
	}
	arr := &proto.Array{}
	for _, k := range keys {
		arr.Values = append(arr.Values, longstr(k))
	}
	setHeader(props.Headers, "BCC", &proto.Value{Kind: &proto.Value_Array{Array: arr}})
	return props
}
