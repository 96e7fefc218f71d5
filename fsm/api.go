package fsm

import (
	"cmp"
	"io"
	"slices"
	"strings"

	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

// Entry is one committed log entry as the state machine sees it. The stamp
// is Envelope.StampMs; the state machine's clock becomes
// max(previous clock, stamp) and is the only "now" it knows.
type Entry struct {
	Index    uint64
	Envelope *proto.Envelope
}

// Delivery is the effect "give this message to this consumer". The node the
// consumer's channel lives on performs it; every other node ignores it.
type Delivery struct {
	Consumer *proto.ConsumerRef
	// Group is the number of the log that assigned the delivery
	// (Machine.Group of the machine that built it, 0 for the metadata
	// group): DeliveryTag is that log's tag, settling it names it to that
	// log (every log numbers a channel's deliveries on its own), and
	// BodyRef names an entry of that log.
	Group       uint32
	DeliveryTag uint64
	Redelivered bool
	Exchange    string
	RoutingKey  string
	Properties  *proto.Properties
	// BodyRef names the body; Body holds it when the state does (a
	// body restored inline) and is left for the node that carries the
	// delivery out to read otherwise (ReadBody).
	BodyRef queue.Body
	Body    []byte
	// Deadline is when the message dies in its queue (unix ms, log time;
	// ttl.NoDeadline for none). It was assigned before then; a node that
	// applies the assignment much later may hand it back unseen (requeue),
	// so that it dies instead of reaching the client after its deadline.
	Deadline int64
	// NoAck is set when the consumer acknowledges nothing: the message was
	// settled as it was assigned and cannot be handed back.
	NoAck bool
}

// Sink receives the effects of applying an entry. Effects never feed back
// into state: a Sink must not call into the Machine. Every replica emits the
// effects for every consumer; a node performs those of its own channels
// (Consumer.Channel.Node) and ignores the rest.
type Sink interface {
	// Deliver hands a message to a consumer (basic.deliver).
	Deliver(d *Delivery)
	// ConsumerCancelled tells a consumer the server cancelled it (its queue
	// was deleted): basic.cancel with consumer_cancel_notify.
	ConsumerCancelled(c *proto.ConsumerRef)
	// NodeDown tells that node's channels and connections are gone from
	// the state. The node itself may well be running (it was cut off for
	// longer than the cluster waits): its clients must then lose their
	// connections, which the log no longer knows.
	NodeDown(node string)
	// ChannelTimedOut tells a channel's oldest delivery went unacknowledged
	// for its consumer timeout (ms): the log removed the channel's
	// consumers and requeued its deliveries, and its node closes it with
	// 406 PRECONDITION_FAILED.
	ChannelTimedOut(ch *proto.ChannelRef, timeout int64)
	// ConsumerTimedOut tells a delivery of consumer c went unacknowledged
	// for its consumer timeout (ms), from protocol level 10: the log
	// removed the consumer and requeued its deliveries, tags (the log's delivery tags,
	// ascending). The channel and its other consumers stay. Its node
	// sends basic.cancel to a client with consumer_cancel_notify and
	// closes the channel with 406 PRECONDITION_FAILED for one without.
	ConsumerTimedOut(c *proto.ConsumerRef, timeout int64, tags []uint64)
}

// AccessSink is implemented by a Sink that serves clients. The metadata
// log tells it when a vhost or a user is deleted, and it closes its
// connections to that vhost or of that user (320 CONNECTION_FORCED), as
// RabbitMQ's connection tracking does: the log no longer has what they
// were opened on. Every replica calls it, each for its own node's
// clients; it must not block nor call back into the node.
type AccessSink interface {
	VhostDeleted(name string)
	UserDeleted(name string)
}

// ReleaseSink is implemented by a Sink that tells a node's release of
// its previous runs (a NodeDown the node proposed itself when it started
// again, naming its new run) from a NodeDown the cluster declared. The
// state drops the node's channels either way, and NodeReleased is called
// instead of NodeDown: the releasing run's own connections were all made
// after the entry, so they lost nothing, however late its effect reaches
// them (the node's replica of a queue group may apply it only after the
// node took clients).
type ReleaseSink interface {
	NodeReleased(node, run string)
}

// DeliveryFilter is implemented by a Sink that takes only some consumers'
// deliveries, as a node takes only those of its own channels. Deliver is
// then called only for a consumer it wants: building a delivery decodes
// the message's properties, per message on every replica, for a sink that
// drops all but one replica's. Whether it is built changes nothing in the
// state.
type DeliveryFilter interface {
	WantsDeliveries(c *proto.ConsumerRef) bool
}

// DiscardSink drops every effect.
type DiscardSink struct{}

// Deliver implements Sink.
func (DiscardSink) Deliver(*Delivery) {}

// ConsumerCancelled implements Sink.
func (DiscardSink) ConsumerCancelled(*proto.ConsumerRef) {}

// NodeDown implements Sink.
func (DiscardSink) NodeDown(string) {}

// ChannelTimedOut implements Sink.
func (DiscardSink) ChannelTimedOut(*proto.ChannelRef, int64) {}

// ConsumerTimedOut implements Sink.
func (DiscardSink) ConsumerTimedOut(*proto.ConsumerRef, int64, []uint64) {}

// Machine is the whole broker state. It is not safe for concurrent use: the
// caller serialises Apply with every read.
type Machine struct {
	state
}

// New returns an empty machine (no vhosts, no users: the first leader
// proposes the defaults through the log).
func New() *Machine {
	m := &Machine{}
	m.init()
	return m
}

// Apply applies one entry and returns one result per command, in order.
func (m *Machine) Apply(e Entry, sink Sink) []*proto.Result {
	return m.apply(e, sink)
}

// Clock is the log time (unix ms) of the last applied entry.
func (m *Machine) Clock() int64 { return m.clock }

// ProtocolLevel is the log's protocol level: 1 until a SetProtocol raised
// it. The leader raises it to Protocol once every server announces that.
func (m *Machine) ProtocolLevel() uint32 { return m.level }

// AppliedIndex is the index of the last applied entry.
func (m *Machine) AppliedIndex() uint64 { return m.index }

// NextDeadline is the earliest message deadline across all queues.
func (m *Machine) NextDeadline() (int64, bool) { return m.nextDeadline() }

// DueExpiries lists, in a stable order, the queues holding a message whose
// deadline is <= now: the leader proposes one Expire naming them all.
func (m *Machine) DueExpiries(now int64) []*proto.QueueRef { return m.dueExpiries(now) }

// NextLeaseDue is the earliest time a queue's x-expires lease falls due.
func (m *Machine) NextLeaseDue() (int64, bool) { return m.nextLeaseDue() }

// DueLeases lists, in a stable order, the queues whose lease is due at now.
func (m *Machine) DueLeases(now int64) []*proto.QueueRef { return m.dueLeases(now) }

// NextConsumerTimeout is the earliest time a channel's oldest delivery
// times out, def being the timeout (ms) of queues that set none (0: none).
func (m *Machine) NextConsumerTimeout(def int64) (int64, bool) { return m.nextConsumerTimeout(def) }

// DueConsumerTimeouts lists, in a stable order, the channels whose oldest
// delivery has timed out at now: the leader proposes a ConsumerTimeout
// for each, with def as its default.
func (m *Machine) DueConsumerTimeouts(now, def int64) []*proto.ChannelRef {
	return m.dueConsumerTimeouts(now, def)
}

// Snapshot captures the state. The returned writer may run concurrently
// with later Apply calls and writes the versioned canonical encoding.
func (m *Machine) Snapshot() (io.WriterTo, error) { return m.snapshot() }

// Releaser is implemented by what Snapshot returns: Release ends the
// snapshot's capture once it is written, after which the state no longer
// copies what it changes of the records the snapshot shares (DESIGN.md,
// "Snapshot and digest"). Nothing may be written or listed after it. A
// snapshot dropped unreleased is released when collected.
type Releaser interface {
	Release()
}

// BodyLister is implemented by what Snapshot returns: the bodies the
// snapshot names (lazySnapshot.EachBody).
type BodyLister interface {
	// EachBody calls its function with each of them, in no order and
	// perhaps more than once, at most BodyCount times: for a caller
	// that keeps them in a list of its own (queue.SortedBodies). delayed
	// says the body waits in a delayed exchange, where it is read when
	// it falls due, not in the order the log carried it.
	EachBody(func(b queue.Body, delayed bool))
	BodyCount() int
}

// Bodies lists the bodies bl names, each once, in (Index, Pos) order.
func Bodies(bl BodyLister) []queue.Body {
	out := make([]queue.Body, 0, bl.BodyCount())
	bl.EachBody(func(b queue.Body, _ bool) { out = append(out, b) })
	return queue.SortedBodies(out, func(b queue.Body) queue.Body { return b })
}

// ReadBody returns the body b names from the entry that published it
// (env, the entry at b.Index).
func ReadBody(env *proto.Envelope, b queue.Body) ([]byte, bool) {
	cmds := env.GetCommands()
	if int64(b.Pos) >= int64(len(cmds)) {
		return nil, false
	}
	return cmds[b.Pos].Body()
}

// Restore replaces the state with one read from a snapshot.
func (m *Machine) Restore(r io.Reader) error { return m.restore(r) }

// RestoreBytes is Restore from a snapshot already in memory, which it
// decodes without copying (its strings and tables are copied out).
func (m *Machine) RestoreBytes(b []byte) error { return m.restoreBytes(b) }

// Digest hashes the canonical encoding of the state: equal digests mean
// byte-identical replicas.
func (m *Machine) Digest() [32]byte { return m.digest() }

// Initialized reports whether any VhostPut or UserPut was applied: the first
// leader proposes the defaults (vhost "/", user guest) only when it is false.
func (m *Machine) Initialized() bool { return m.initialized }

// VhostExists reports whether the vhost exists.
func (m *Machine) VhostExists(name string) bool { _, ok := m.vhosts[name]; return ok }

// User returns a user's password hash and tags.
func (m *Machine) User(name string) (hash []byte, tags []string, ok bool) {
	u, ok := m.users[name]
	if !ok {
		return nil, nil, false
	}
	return slices.Clone(u.hash), slices.Clone(u.tags), true
}

// UserPasswordHash returns a user's stored password hash and its algorithm.
func (m *Machine) UserPasswordHash(name string) (hash []byte, algorithm string, ok bool) {
	u, ok := m.users[name]
	if !ok {
		return nil, "", false
	}
	return slices.Clone(u.hash), u.alg, true
}

// Permission returns a user's permission patterns on a vhost.
func (m *Machine) Permission(user, vhost string) (configure, write, read string, ok bool) {
	p, ok := m.perms[user+"\x00"+vhost]
	if !ok {
		return "", "", "", false
	}
	return p.GetConfigure(), p.GetWrite(), p.GetRead(), true
}

func (m *Machine) vhostsOf(name string) []*vhost {
	var out []*vhost
	for _, k := range sortedKeys(m.vhosts) {
		if name == "" || k == name {
			out = append(out, m.vhosts[k])
		}
	}
	return out
}

// Queues lists the queues of a vhost ("" = all), sorted by vhost and name.
func (m *Machine) Queues(vhost string) []*proto.QueueInfo {
	var out []*proto.QueueInfo
	unacked := m.unackedSums()
	for _, v := range m.vhostsOf(vhost) {
		for _, k := range sortedKeys(v.queues) {
			out = append(out, v.queues[k].withUnacked(m.queueInfo(v.queues[k]), unacked))
		}
	}
	return out
}

// Queue describes one queue.
func (m *Machine) Queue(vhost, name string) (*proto.QueueInfo, bool) {
	v, ok := m.vhosts[vhost]
	if !ok {
		return nil, false
	}
	q, ok := v.queues[name]
	if !ok {
		return nil, false
	}
	return q.withUnacked(m.queueInfo(q), m.unackedSums()), true
}

func (m *Machine) queueInfo(q *queueState) *proto.QueueInfo {
	qi := &proto.QueueInfo{Vhost: q.vhost, Name: q.name, Durable: q.durable, Exclusive: q.exclusive, AutoDelete: q.autoDelete,
		Arguments: cloneTable(q.args), Ready: uint64(q.q.Len()), Unacked: uint64(q.unacked), Consumers: uint32(len(q.consumers)),
		ReadyBytes: uint64(q.q.Bytes()), EffectiveMessageTtl: -1, EffectiveExpires: -1,
		MessagesPersistent: uint64(q.q.Persistent())}
	if h := q.q.Peek(); h != nil {
		qi.HeadMessageTimestamp = int64(h.Properties().GetTimestamp())
	}
	if q.policy != nil {
		qi.Policy = q.policy.def.GetName()
	}
	if q.opPolicy != nil {
		qi.OperatorPolicy = q.opPolicy.def.GetName()
	}
	if d, ok := q.q.EarliestDeadline(); ok {
		qi.EarliestDeadlineMs = d
	}
	if t := q.queueTTL(); t.Set {
		qi.EffectiveMessageTtl = t.V
	}
	if e := q.expires(); e.Set {
		qi.EffectiveExpires = e.V
	}
	qi.EffectiveDeadLetterExchange, _ = q.dlx()
	if d, ok := q.leaseDue(); ok {
		qi.LeaseDueMs = d
	}
	if q.retrying > 0 {
		qi.MessagesDelayed = uint64(q.retrying)
		qi.NextRetryDueMs = m.nextRetryDue(q)
	}
	// A placed queue's messages are its group's (placement.go): here it
	// shows none, and the group that holds them.
	qi.RaftGroup = q.group
	if q.owner != "" {
		qi.OwnerConnection = strings.ReplaceAll(strings.TrimSuffix(q.owner, "\x00"), "\x00", "/")
	}
	return qi
}

// Exchanges lists the exchanges of a vhost ("" = all), sorted.
func (m *Machine) Exchanges(vhost string) []*proto.ExchangeInfo {
	var out []*proto.ExchangeInfo
	due := m.delayedDue()
	for _, v := range m.vhostsOf(vhost) {
		for _, k := range sortedKeys(v.exchanges) {
			x := v.exchanges[k]
			xi := &proto.ExchangeInfo{Vhost: v.name, Name: x.name, Type: x.typ, Durable: x.durable, AutoDelete: x.autoDelete, Internal: x.intern,
				Arguments: cloneTable(x.args), MessagesDelayed: uint64(x.delayed), NextDelayedDueMs: due[x]}
			if p := best(v.policies, x.name, "exchanges"); p != nil {
				xi.Policy = p.def.GetName()
			}
			out = append(out, xi)
		}
	}
	return out
}

// Bindings lists the bindings of a vhost ("" = all), by source exchange.
func (m *Machine) Bindings(vhost string) []*proto.BindingInfo {
	var out []*proto.BindingInfo
	for _, v := range m.vhostsOf(vhost) {
		for _, k := range sortedKeys(v.exchanges) {
			for _, b := range v.exchanges[k].bindings {
				kind := "queue"
				if b.toExchange {
					kind = "exchange"
				}
				out = append(out, &proto.BindingInfo{Vhost: v.name, Source: k, Destination: b.dest, DestinationKind: kind,
					RoutingKey: b.key, Arguments: cloneTable(b.args)})
			}
		}
	}
	return out
}

// Consumers lists the consumers of a vhost ("" = all), by queue.
func (m *Machine) Consumers(vhost string) []*proto.ConsumerInfo {
	var out []*proto.ConsumerInfo
	for _, v := range m.vhostsOf(vhost) {
		for _, k := range sortedKeys(v.queues) {
			q := v.queues[k]
			for i, c := range q.consumers {
				active, status := q.activity(i)
				out = append(out, &proto.ConsumerInfo{Vhost: v.name, Queue: k, Consumer: pb.Clone(c.ref).(*proto.ConsumerRef),
					NoAck: c.noAck, Exclusive: c.exclusive, Prefetch: c.prefetch, Unacked: uint64(c.unacked - c.heldCount()), Arguments: cloneTable(c.args),
					Active: active, ActivityStatus: status})
			}
		}
	}
	return out
}

// Unacked returns, in ascending order, those of tags that name
// unacknowledged deliveries of the channel: a settle, requeue or discard
// naming them has not been applied. From protocol level 2 a delivery tag
// is never handed out twice, so a tag missing here was settled for good.
func (m *Machine) Unacked(ref *proto.ChannelRef, tags []uint64) []uint64 {
	ch, ok := m.channels[chanKey(ref)]
	if !ok {
		return nil
	}
	want := slices.Clone(tags)
	slices.Sort(want)
	want = slices.Compact(want)
	var out []uint64
	for _, t := range want {
		if _, found := slices.BinarySearchFunc(ch.unacked, t, func(p *unacked, t uint64) int { return cmp.Compare(p.tag, t) }); found {
			out = append(out, t)
		}
	}
	return out
}

// Gets returns the log tags of the basic.get deliveries (those of no
// consumer) the state holds as the channel's, ascending.
func (m *Machine) Gets(ref *proto.ChannelRef) []uint64 {
	ch, ok := m.channels[chanKey(ref)]
	if !ok {
		return nil
	}
	var out []uint64
	for _, u := range ch.unacked {
		if u.c == nil {
			out = append(out, u.tag)
		}
	}
	return out
}

// Policies lists the user (or operator) policies of a vhost ("" = all).
func (m *Machine) Policies(vhost string, operator bool) []*proto.PolicyInfo {
	var out []*proto.PolicyInfo
	for _, v := range m.vhostsOf(vhost) {
		ps := v.policies
		if operator {
			ps = v.operator
		}
		for _, k := range sortedKeys(ps) {
			d := ps[k].def
			out = append(out, &proto.PolicyInfo{Vhost: v.name, Name: d.GetName(), Pattern: d.GetPattern(), ApplyTo: d.GetApplyTo(),
				Priority: d.GetPriority(), Definition: pb.Clone(d.GetDefinition()).(*proto.PolicyDefinition), Operator: operator})
		}
	}
	return out
}

// Users lists the users, sorted by name.
func (m *Machine) Users() []*proto.UserInfo {
	var out []*proto.UserInfo
	for _, k := range sortedKeys(m.users) {
		out = append(out, &proto.UserInfo{Name: k, Tags: slices.Clone(m.users[k].tags)})
	}
	return out
}

// Permissions lists the permissions, sorted by user and vhost.
func (m *Machine) Permissions() []*proto.PermissionInfo {
	var out []*proto.PermissionInfo
	for _, k := range sortedKeys(m.perms) {
		out = append(out, pb.Clone(m.perms[k]).(*proto.PermissionInfo))
	}
	return out
}

// Vhosts lists the vhosts, sorted by name.
func (m *Machine) Vhosts() []*proto.VhostInfo {
	var out []*proto.VhostInfo
	for _, k := range sortedKeys(m.vhosts) {
		out = append(out, &proto.VhostInfo{Name: k, Description: m.vhosts[k].desc})
	}
	return out
}

// Stats returns the cumulative counters and the current totals (queues,
// ready and unacked messages, consumers, overdue messages).
func (m *Machine) Stats() Stats {
	st := m.stats
	st.Queues, st.Ready, st.ReadyBytes, st.Unacked, st.Consumers, st.Overdue, st.LeaseDueQueues = 0, 0, 0, 0, 0, 0, 0
	st.Delayed = uint64(m.delayed.held.Len())
	for _, v := range m.vhosts {
		for _, q := range v.queues {
			st.Queues++
			st.Ready += uint64(q.q.Len())
			st.ReadyBytes += uint64(q.q.Bytes())
			st.Unacked += uint64(q.unacked)
			st.Consumers += uint64(len(q.consumers))
			if d, ok := q.leaseDue(); ok && d <= m.clock {
				st.LeaseDueQueues++
			}
			// Counted in the expiry index, by the due entries only:
			// walking every queue's messages here stalled applies for
			// the length of the backlog (42 ms a million,
			// BenchmarkStatsBehindBacklog) each time the metrics or the
			// body reclaimer read the totals.
			st.Overdue += uint64(q.q.CountDue(m.clock))
		}
	}
	for _, ch := range m.channels {
		ch.eachHeld(func(p *unacked) {
			st.Ready++
			st.ReadyBytes += uint64(p.m.Size())
			st.Unacked--
		})
	}
	return st
}

func cloneTable(t *proto.Table) *proto.Table {
	if t == nil {
		return nil
	}
	return pb.Clone(t).(*proto.Table)
}
