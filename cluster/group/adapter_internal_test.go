package group

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
	"google.golang.org/protobuf/encoding/protowire"
	gproto "google.golang.org/protobuf/proto"
)

func discardLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 1}))
}

// testNode is what a node gives the adapter, for tests: its state,
// applied index and proposals, and how it fails and closes.
type testNode struct {
	state     *State
	applied   *AppliedIndex
	proposals *Proposals
	closing   chan struct{}
	failed    chan struct{}
	failErr   error
}

func (n *testNode) AppliedIndex() uint64 {
	i, _ := n.applied.Load()
	return i
}

func (n *testNode) Failed() <-chan struct{} { return n.failed }

func (n *testNode) Err() error {
	select {
	case <-n.failed:
		return n.failErr
	default:
		return nil
	}
}

func testAdapter() (*FSM, *testNode) {
	n := &testNode{state: NewState(), applied: NewAppliedIndex(), proposals: &Proposals{},
		closing: make(chan struct{}), failed: make(chan struct{})}
	f := NewFSM(FSMConfig{NodeID: "me", Logger: discardLogger(), State: n.state, Applied: n.applied, Proposals: n.proposals,
		Closing: n.closing, Host: FSMHost{Err: n.Err, Fail: func(err error) { n.failErr = err; close(n.failed) }}})
	return f, n
}

func entry(t *testing.T, index uint64, env *proto.Envelope) *raft.Log {
	t.Helper()
	b, err := gproto.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: b}
}

func TestFSMAdapter_ApplyBatchAndSnapshot(t *testing.T) {
	a, n := testAdapter()
	tick := &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
	logs := []*raft.Log{
		entry(t, 3, &proto.Envelope{Version: 1, StampMs: 100, Commands: []*proto.Command{tick, tick}}),
		{Index: 4, Type: raft.LogConfiguration},
		entry(t, 5, &proto.Envelope{Version: 1, StampMs: 90, Commands: []*proto.Command{tick}}),
	}
	out := a.ApplyBatch(logs)
	if len(out) != 3 || out[1] != nil {
		t.Fatalf("responses %v", out)
	}
	if r := out[0].([]*proto.Result); len(r) != 2 || r[0].GetIndex() != 3 {
		t.Fatalf("results of entry 3: %v", r)
	}
	if got := n.AppliedIndex(); got != 5 {
		t.Fatalf("applied %d, want 5", got)
	}
	if n.state.m.Clock() != 100 {
		t.Fatalf("clock %d: log time must not go back", n.state.m.Clock())
	}

	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&memSink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	b, nb := testAdapter()
	if err := b.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if nb.state.m.Digest() != n.state.m.Digest() || nb.AppliedIndex() != 5 {
		t.Fatalf("restored state differs (applied %d)", nb.AppliedIndex())
	}
}

// An entry this binary cannot apply stops the node at that entry with an
// error naming it, instead of a panic that every restart repeats: the
// entries before it are applied, nothing after, and no snapshot is taken.
func TestFSMAdapter_UnreadableEntryStopsTheNode(t *testing.T) {
	newKind := &proto.Command{}
	// Field 99 of Command: a kind this binary does not know.
	newKind.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.BytesType), 0))
	tick := &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
	for name, tc := range map[string]struct {
		l    *raft.Log
		want string
	}{
		"garbage":     {&raft.Log{Index: 7, Type: raft.LogCommand, Data: []byte{0xff, 0xff, 0xff}}, "log entry 7 is not an Envelope this version reads"},
		"new version": {entry(t, 7, &proto.Envelope{Version: 2}), "log entry 7 has envelope version 2 and this version reads only 1: it was written by a newer version; upgrade this node"},
		"no version":  {entry(t, 7, &proto.Envelope{}), "log entry 7 has envelope version 0, which no version of raftmq writes"},
		"new kind":    {entry(t, 7, &proto.Envelope{Version: 1, Commands: []*proto.Command{tick, newKind}}), fmt.Sprintf("log entry 7, command 1: a command kind this version (protocol %d) does not know, written by a newer version; upgrade this node", fsm.Protocol)},
		"new level": {entry(t, 7, &proto.Envelope{Version: 1, Commands: []*proto.Command{{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: fsm.Protocol + 1}}}}}),
			fmt.Sprintf("log entry 7, command 0: raises the protocol level to %d, and this version applies up to %d; written by a newer version; upgrade this node", fsm.Protocol+1, fsm.Protocol)},
	} {
		t.Run(name, func(t *testing.T) {
			a, n := testAdapter()
			before := entry(t, 6, &proto.Envelope{Version: 1, StampMs: 100, Commands: []*proto.Command{tick}})
			after := entry(t, 8, &proto.Envelope{Version: 1, StampMs: 300, Commands: []*proto.Command{tick}})
			done := make(chan []any)
			go func() { done <- a.ApplyBatch([]*raft.Log{before, tc.l, after}) }()
			<-n.Failed()
			if err := n.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			select {
			case <-done:
				t.Fatal("ApplyBatch returned while the node is open: raft would apply the next entries")
			default:
			}
			if _, err := a.Snapshot(); err == nil {
				t.Fatal("a node that stopped applying took a snapshot")
			}
			close(n.closing)
			out := <-done
			if out[0] == nil || out[1] != nil || out[2] != nil {
				t.Fatalf("responses %v: only the entry before the unreadable one applies", out)
			}
			if n.AppliedIndex() != 6 || n.state.m.AppliedIndex() != 6 || n.state.m.Clock() != 100 {
				t.Fatalf("applied %d (machine %d, clock %d), want 6", n.AppliedIndex(), n.state.m.AppliedIndex(), n.state.m.Clock())
			}
		})
	}
}

type recSink struct{ delivered, cancelled, down, timedOut, consumersTimedOut []string }

func (s *recSink) ConsumerTimedOut(c *proto.ConsumerRef, _ int64, _ []uint64) {
	s.consumersTimedOut = append(s.consumersTimedOut, c.GetTag())
}

func (s *recSink) NodeDown(node string) { s.down = append(s.down, node) }

func (s *recSink) ChannelTimedOut(ch *proto.ChannelRef, _ int64) {
	s.timedOut = append(s.timedOut, ch.GetConnection())
}

func (s *recSink) Deliver(d *fsm.Delivery) { s.delivered = append(s.delivered, d.Consumer.GetTag()) }
func (s *recSink) ConsumerCancelled(c *proto.ConsumerRef) {
	s.cancelled = append(s.cancelled, c.GetTag())
}

func TestLocalSink_KeepsOnlyThisNodesEffects(t *testing.T) {
	rec := &recSink{}
	s := localSink{node: "me", next: rec}
	ref := func(node, tag string) *proto.ConsumerRef {
		return &proto.ConsumerRef{Channel: &proto.ChannelRef{Node: node}, Tag: tag}
	}
	if !s.WantsDeliveries(ref("me", "a")) || s.WantsDeliveries(ref("other", "b")) {
		t.Fatal("the sink asks for other nodes' deliveries, or not for its own")
	}
	s.Deliver(&fsm.Delivery{Consumer: ref("me", "a")})
	s.Deliver(&fsm.Delivery{Consumer: ref("other", "b")})
	s.ConsumerCancelled(ref("other", "c"))
	s.ConsumerCancelled(ref("me", "d"))
	s.NodeDown("other")
	s.NodeDown("me")
	s.ChannelTimedOut(&proto.ChannelRef{Node: "other", Connection: "e"}, 1)
	s.ChannelTimedOut(&proto.ChannelRef{Node: "me", Connection: "f"}, 1)
	s.ConsumerTimedOut(ref("other", "g"), 1, []uint64{1})
	s.ConsumerTimedOut(ref("me", "h"), 1, []uint64{1})
	if len(rec.delivered) != 1 || rec.delivered[0] != "a" || len(rec.cancelled) != 1 || rec.cancelled[0] != "d" ||
		len(rec.down) != 1 || rec.down[0] != "me" || len(rec.timedOut) != 1 || rec.timedOut[0] != "f" ||
		len(rec.consumersTimedOut) != 1 || rec.consumersTimedOut[0] != "h" {
		t.Fatalf("delivered %v cancelled %v down %v timed out %v consumers timed out %v",
			rec.delivered, rec.cancelled, rec.down, rec.timedOut, rec.consumersTimedOut)
	}
}

// The sink keeps the consumer timeouts of other nodes' channels, with
// the index of the entry applied, for their syncs; this node's own go
// to its channels alone. The last maxRecentTimeouts are kept, oldest
// first.
func TestLocalSink_KeepsOtherNodesTimeoutsForTheirSyncs(t *testing.T) {
	f := &FSM{}
	s := &localSink{node: "me", next: &recSink{}, f: f}
	ref := func(node, tag string) *proto.ConsumerRef {
		return &proto.ConsumerRef{Channel: &proto.ChannelRef{Node: node, Connection: tag}, Tag: tag}
	}
	s.index = 7
	s.ConsumerTimedOut(ref("other", "a"), 1, []uint64{2})
	s.ConsumerTimedOut(ref("me", "b"), 1, nil)
	s.index = 9
	s.ChannelTimedOut(ref("other", "c").GetChannel(), 1)
	s.ChannelTimedOut(ref("third", "d").GetChannel(), 1)
	got := f.timeouts.of("other")
	if len(got) != 2 || got[0].Index != 7 || got[0].Effect.ConsumerTimedOut.GetTag() != "a" ||
		got[1].Index != 9 || got[1].Effect.ChannelTimedOut.GetConnection() != "c" {
		t.Fatalf("other's timeouts %+v", got)
	}
	if got := f.timeouts.of("me"); len(got) != 0 {
		t.Fatalf("this node's own timeouts kept: %+v", got)
	}
	for i := range maxRecentTimeouts + 5 {
		s.index = uint64(100 + i)
		s.ConsumerTimedOut(ref("third", "e"), 1, nil)
	}
	got = f.timeouts.of("third")
	if len(got) != maxRecentTimeouts || got[0].Index != 105 || got[len(got)-1].Index != 100+maxRecentTimeouts+4 {
		t.Fatalf("%d kept for third, from %d to %d", len(got), got[0].Index, got[len(got)-1].Index)
	}
	if got := f.timeouts.of("other"); len(got) != 0 {
		t.Fatalf("other's timeouts outlived the bound: %+v", got)
	}
}

type memSink struct{ *bytes.Buffer }

func (memSink) ID() string    { return "mem" }
func (memSink) Cancel() error { return nil }
func (memSink) Close() error  { return nil }

// An entry this node proposed is applied from the Envelope it built, once:
// the proposal is forgotten, and the same bytes seen again are decoded.
func TestFSMAdapter_AppliesOwnProposalOnce(t *testing.T) {
	a, n := testAdapter()
	tick := &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
	l := entry(t, 3, &proto.Envelope{Version: 1, StampMs: 100, Commands: []*proto.Command{tick}})
	// Registered with another stamp, so the test sees which one applied.
	n.proposals.Put(l.Data, &proto.Envelope{Version: 1, StampMs: 200, Commands: []*proto.Command{tick}})
	a.ApplyBatch([]*raft.Log{l})
	if n.state.m.Clock() != 200 {
		t.Fatalf("clock %d: the proposal was not applied", n.state.m.Clock())
	}
	if n.proposals.Len() != 0 {
		t.Fatal("an applied proposal is still held")
	}
	n.proposals.Put(l.Data, &proto.Envelope{Version: 1, StampMs: 300})
	n.proposals.Drop(l.Data)
	if n.proposals.Len() != 0 || n.proposals.Take(l.Data) != nil {
		t.Fatal("a dropped proposal is still held")
	}
}

// A log into which an earlier version let an empty command replays: the
// command is refused on every replica and the node goes on, where it
// used to panic at every restart.
func TestFSMAdapter_EmptyCommandOfAnOldLogReplays(t *testing.T) {
	a, n := testAdapter()
	tick := &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
	out := a.ApplyBatch([]*raft.Log{
		entry(t, 1, &proto.Envelope{Version: 1, StampMs: 100, Commands: []*proto.Command{{}, tick}}),
		entry(t, 2, &proto.Envelope{Version: 1, StampMs: 200, Commands: []*proto.Command{tick}}),
	})
	res := out[0].([]*proto.Result)
	if res[0].GetCode() != 541 || res[1].GetCode() != 0 {
		t.Fatalf("results %v", res)
	}
	if n.Err() != nil || n.AppliedIndex() != 2 || n.state.m.Clock() != 200 {
		t.Fatalf("err %v, applied %d, clock %d", n.Err(), n.AppliedIndex(), n.state.m.Clock())
	}
}

// A restore replaces the machine but keeps its release counts, which are
// not in the snapshot: a node's metrics counters do not go back.
func TestFSMAdapter_RestoreKeepsReleaseCounts(t *testing.T) {
	a, n := testAdapter()
	str := func(s string) *proto.Value { return &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(s)}} }
	setup := []*proto.Command{
		{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: fsm.Protocol}}},
		{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dx", Type: fsm.DelayedExchangeType,
			Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-delayed-type", Value: str("direct")}}}}}},
		{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "dx", Properties: &proto.Properties{Headers: &proto.Table{
			Fields: []*proto.Field{{Key: "x-delay", Value: &proto.Value{Kind: &proto.Value_Int64{Int64: 10}}}}}}}}},
	}
	release := &proto.Command{Cmd: &proto.Command_ReleaseDelayed{ReleaseDelayed: &proto.ReleaseDelayed{Limit: 10}}}
	a.ApplyBatch([]*raft.Log{
		entry(t, 1, &proto.Envelope{Version: 1, StampMs: 100, Commands: setup}),
		entry(t, 2, &proto.Envelope{Version: 1, StampMs: 150, Commands: []*proto.Command{release}}),
	})
	want := n.state.m.Releases()
	if want.Released != 1 || want.LateSumMs != 40 {
		t.Fatalf("releases %+v", want)
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&memSink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	before := n.state.m
	if err := a.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if n.state.m == before || n.state.m.Releases() != want {
		t.Fatalf("after the restore: %+v, want %+v", n.state.m.Releases(), want)
	}
}

// After a large snapshot the node gives its free heap back to the
// operating system at once (returnMemory), after a small one it leaves it
// to the runtime.
func TestSnapshotRelease_LargeReturnsFreeHeap(t *testing.T) {
	f := &FSM{}
	var st runtime.MemStats
	garbage := func() {
		b := make([][]byte, 64)
		for i := range b {
			b[i] = make([]byte, 1<<20)
		}
		runtime.KeepAlive(b)
		runtime.GC()
	}
	forced := func() uint32 { runtime.ReadMemStats(&st); return st.NumForcedGC }
	// A quiet log's hand-back (giveback.go) waits, so that it is not
	// counted among the collections below.
	quietReturn.mu.Lock()
	defer quietReturn.mu.Unlock()

	f.snapLive.Store(returnAfterBodies - 1)
	garbage()
	before := forced()
	fsmSnapshot{f: f}.Release()
	if after := forced(); after != before {
		t.Fatalf("a small snapshot forced %d collections", after-before)
	}

	f.snapLive.Store(returnAfterBodies)
	garbage()
	before = forced()
	fsmSnapshot{f: f}.Release()
	if after := forced(); after != before+1 {
		t.Fatalf("a large snapshot forced %d collections, want 1", after-before)
	}
	if kept := st.HeapIdle - st.HeapReleased; kept > 16<<20 {
		t.Fatalf("%d bytes of free heap still resident after a large snapshot", kept)
	}
}
