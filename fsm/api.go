package fsm

import (
	"io"

	"github.com/raftmq/raftmq/proto"
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
	Consumer    *proto.ConsumerRef
	DeliveryTag uint64
	Redelivered bool
	Exchange    string
	RoutingKey  string
	Properties  *proto.Properties
	Body        []byte
}

// Sink receives the effects of applying an entry. Effects never feed back
// into state: a Sink must not call into the Machine.
type Sink interface {
	// Deliver hands a message to a consumer (basic.deliver).
	Deliver(d *Delivery)
	// ConsumerCancelled tells a consumer the server cancelled it (its queue
	// was deleted): basic.cancel with consumer_cancel_notify.
	ConsumerCancelled(c *proto.ConsumerRef)
}

// DiscardSink drops every effect.
type DiscardSink struct{}

// Deliver implements Sink.
func (DiscardSink) Deliver(*Delivery) {}

// ConsumerCancelled implements Sink.
func (DiscardSink) ConsumerCancelled(*proto.ConsumerRef) {}

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

// Snapshot captures the state. The returned writer may run concurrently
// with later Apply calls and writes the versioned canonical encoding.
func (m *Machine) Snapshot() (io.WriterTo, error) { return m.snapshot() }

// Restore replaces the state with one read from a snapshot.
func (m *Machine) Restore(r io.Reader) error { return m.restore(r) }

// Digest hashes the canonical encoding of the state: equal digests mean
// byte-identical replicas.
func (m *Machine) Digest() [32]byte { return m.digest() }

// Initialized reports whether any VhostPut or UserPut was applied: the first
// leader proposes the defaults (vhost "/", user guest) only when it is false.
func (m *Machine) Initialized() bool { return m.initialized }
