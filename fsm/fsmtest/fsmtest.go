// Package fsmtest drives a state machine in tests: it builds entries with
// increasing indexes and records the effects.
package fsmtest

import (
	"sync"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

// published keeps the body of every Publish (Enqueue, HandOff) applied through Apply, by the
// name the state machine gives it (queue.Body), as a node keeps its log:
// the state machine names bodies and the test reads them back. Machines
// of one test that apply different publishes at the same index overwrite
// each other's; the last one applied is the one read.
var published struct {
	sync.Mutex
	bodies map[[2]uint64][]byte
}

func remember(index uint64, cmds []*proto.Command) {
	published.Lock()
	defer published.Unlock()
	if published.bodies == nil {
		published.bodies = map[[2]uint64][]byte{}
	}
	for i, c := range cmds {
		switch {
		case c.GetPublish() != nil:
			published.bodies[[2]uint64{index, uint64(i)}] = c.GetPublish().GetBody()
		case c.GetEnqueue() != nil:
			published.bodies[[2]uint64{index, uint64(i)}] = c.GetEnqueue().GetBody()
		case c.GetHandOff().GetMessage() != nil:
			published.bodies[[2]uint64{index, uint64(i)}] = c.GetHandOff().GetMessage().GetBody()
		}
	}
}

// Body returns the bytes of a body the state machine named, from the
// entries applied through Apply.
func Body(b queue.Body) []byte {
	published.Lock()
	defer published.Unlock()
	return published.bodies[[2]uint64{b.Index, uint64(b.Pos)}]
}

// fill puts the bodies into deliveries and get results, as the node that
// carries them out does.
func fill(res []*proto.Result, ds []*fsm.Delivery) {
	for _, d := range ds {
		if d.Body == nil {
			d.Body = Body(d.BodyRef)
		}
	}
	for _, r := range res {
		if g := r.GetGet(); g != nil && g.BodyIndex != 0 {
			g.Body = Body(queue.Body{Index: g.BodyIndex, Pos: g.BodyPos})
			g.BodyIndex, g.BodyPos = 0, 0
		}
	}
}

// Recorder is a Sink that keeps every effect in order.
type Recorder struct {
	Deliveries []*fsm.Delivery
	Cancelled  []*proto.ConsumerRef
	Down       []string // nodes declared down
	TimedOut   []TimedOut
	// ConsumersTimedOut are the ConsumerTimedOut effects.
	ConsumersTimedOut []ConsumerTimedOut
	// VhostsDeleted and UsersDeleted are the AccessSink's.
	VhostsDeleted, UsersDeleted []string
}

// ConsumerTimedOut is a ConsumerTimedOut effect.
type ConsumerTimedOut struct {
	Consumer *proto.ConsumerRef
	Timeout  int64
	Tags     []uint64
}

// ConsumerTimedOut implements fsm.Sink.
func (r *Recorder) ConsumerTimedOut(c *proto.ConsumerRef, timeout int64, tags []uint64) {
	r.ConsumersTimedOut = append(r.ConsumersTimedOut, ConsumerTimedOut{Consumer: c, Timeout: timeout, Tags: tags})
}

// TimedOut is a ChannelTimedOut effect.
type TimedOut struct {
	Channel *proto.ChannelRef
	Timeout int64
}

// ChannelTimedOut implements fsm.Sink.
func (r *Recorder) ChannelTimedOut(ch *proto.ChannelRef, timeout int64) {
	r.TimedOut = append(r.TimedOut, TimedOut{Channel: ch, Timeout: timeout})
}

// Deliver implements fsm.Sink.
func (r *Recorder) Deliver(d *fsm.Delivery) { r.Deliveries = append(r.Deliveries, d) }

// ConsumerCancelled implements fsm.Sink.
func (r *Recorder) ConsumerCancelled(c *proto.ConsumerRef) { r.Cancelled = append(r.Cancelled, c) }

// NodeDown implements fsm.Sink.
func (r *Recorder) NodeDown(node string) { r.Down = append(r.Down, node) }

// VhostDeleted implements fsm.AccessSink.
func (r *Recorder) VhostDeleted(name string) { r.VhostsDeleted = append(r.VhostsDeleted, name) }

// UserDeleted implements fsm.AccessSink.
func (r *Recorder) UserDeleted(name string) { r.UsersDeleted = append(r.UsersDeleted, name) }

// New returns a machine with the defaults applied at stamp 1: vhost "/"
// and user guest, at protocol level fsm.Protocol, as a new cluster's log
// is.
func New(t testing.TB) *fsm.Machine {
	t.Helper()
	return NewAt(t, fsm.Protocol)
}

// NewAt is New at a given protocol level: 1 is a log written before
// levels existed, which never raised it.
func NewAt(t testing.TB, level uint32) *fsm.Machine {
	t.Helper()
	m := fsm.New()
	cmds := []*proto.Command{
		{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{Name: "guest", Tags: []string{"administrator"}}}},
	}
	if level > 1 {
		cmds = append(cmds, SetProtocol(level))
	}
	res, _ := Apply(t, m, 1, cmds...)
	for i, r := range res {
		if r.GetCode() != 0 {
			t.Fatalf("defaults: command %d refused: %v", i, r)
		}
	}
	if got := m.ProtocolLevel(); got != level {
		t.Fatalf("protocol level %d, want %d", got, level)
	}
	return m
}

// SetProtocol is the command raising the log's protocol level.
func SetProtocol(level uint32) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: level}}}
}

// ConsumerTimeout is the command the leader proposes for a channel whose
// oldest delivery may have timed out, with its default timeout (ms).
func ConsumerTimeout(ch *proto.ChannelRef, def int64) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_ConsumerTimeout{ConsumerTimeout: &proto.ConsumerTimeout{Channel: ch, DefaultMs: def}}}
}

// Apply applies one entry holding cmds at stamp (the next index) and
// returns the results and the recorded effects.
func Apply(t testing.TB, m *fsm.Machine, stamp int64, cmds ...*proto.Command) ([]*proto.Result, *Recorder) {
	t.Helper()
	r := &Recorder{}
	index := m.AppliedIndex() + 1
	remember(index, cmds)
	res := m.Apply(fsm.Entry{Index: index, Envelope: &proto.Envelope{Version: 1, StampMs: stamp, Commands: cmds}}, r)
	if len(res) != len(cmds) {
		t.Fatalf("Apply: %d results for %d commands", len(res), len(cmds))
	}
	fill(res, r.Deliveries)
	return res, r
}

// One applies a single command and returns its result and the effects.
func One(t testing.TB, m *fsm.Machine, stamp int64, c *proto.Command) (*proto.Result, *Recorder) {
	t.Helper()
	res, r := Apply(t, m, stamp, c)
	return res[0], r
}
