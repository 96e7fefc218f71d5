package group

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/bodies"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// relocNode is a group's FSM on real storage: a write-ahead log, a body
// store and the log raft writes through (cache, pin).
type relocNode struct {
	st      *Storage
	store   *bodies.Store
	logs    raft.LogStore
	f       *FSM
	closing chan struct{}
}

const (
	relocBody    = 4 << 10
	relocStepLen = 16 * relocBody // 16 bodies a step
	relocKept    = 64             // bodies of queue "keep"
	relocTrail   = 4              // TrailingLogs
)

func openRelocNode(t *testing.T, dir string) *relocNode {
	t.Helper()
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := bodies.Open(filepath.Join(dir, "bodies"), st.Entries(), bodies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := &relocNode{st: st, store: store, logs: st.Logs(store.Pin), closing: make(chan struct{})}
	n.f = NewFSM(FSMConfig{NodeID: "me", Logger: discardLogger(), State: NewState(), Applied: NewAppliedIndex(),
		Proposals: &Proposals{}, Storage: st, Bodies: store, TrailingLogs: relocTrail, Closing: n.closing})
	n.f.relocBytes = relocStepLen
	n.f.reloc.idle = sync.NewCond(&n.f.reloc.mu)
	t.Cleanup(func() { n.close() })
	return n
}

func (n *relocNode) close() {
	select {
	case <-n.closing:
		return
	default:
	}
	close(n.closing)
	n.waitIdle()
	_ = n.store.Close()
	_ = n.st.Close()
}

func (n *relocNode) waitIdle() {
	r := &n.f.reloc
	r.mu.Lock()
	for r.running {
		r.idle.Wait()
	}
	r.mu.Unlock()
}

// append stores and applies one entry of cmds, as raft would.
func (n *relocNode) append(t *testing.T, cmds ...*proto.Command) uint64 {
	t.Helper()
	last, err := n.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	l := entry(t, last+1, &proto.Envelope{Version: 1, StampMs: int64(last + 1), Commands: cmds})
	l.Term = 1
	if err := n.logs.StoreLogs([]*raft.Log{l}); err != nil {
		t.Fatal(err)
	}
	n.f.ApplyBatch([]*raft.Log{l})
	return l.Index
}

func relocBodyOf(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, relocBody/2) }

// fill publishes relocKept bodies to "keep" and twice as many to "drop",
// then purges "drop": a log mostly dead, so that a snapshot compacts it
// and relocates what "keep" holds.
func (n *relocNode) fill(t *testing.T) []bodies.Key {
	t.Helper()
	ch := &proto.ChannelRef{Node: "me", Connection: "c1", Channel: 1}
	conn := &proto.ConnectionRef{Node: "me", Connection: "c1"}
	n.append(t, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}})
	for _, q := range []string{"keep", "drop"} {
		n.append(t, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: q, Durable: true, Connection: conn}}})
	}
	pub := func(q string, body []byte) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: q, Body: body, Channel: ch}}}
	}
	var keys []bodies.Key
	for i := range relocKept {
		keys = append(keys, bodies.Key{Index: n.append(t, pub("keep", relocBodyOf(i)))})
		n.append(t, pub("drop", relocBodyOf(0)))
		n.append(t, pub("drop", relocBodyOf(0)))
	}
	n.append(t, &proto.Command{Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{Vhost: "/", Name: "drop"}}})
	// The trailing entries raft keeps behind a snapshot.
	for range relocTrail {
		n.append(t, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
	}
	return keys
}

// snapshot takes and persists a snapshot and compacts the log as raft
// does after it; it returns the snapshot's bytes and index.
func (n *relocNode) snapshot(t *testing.T) ([]byte, uint64) {
	t.Helper()
	s, err := n.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var buf bytes.Buffer
	if err := s.Persist(&memSink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	index := s.(fsmSnapshot).index
	first, _ := n.logs.FirstIndex()
	if err := n.logs.DeleteRange(first, index-relocTrail); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), index
}

func checkBodies(t *testing.T, store *bodies.Store, keys []bodies.Key) {
	t.Helper()
	for i, k := range keys {
		b, err := store.Get(k)
		if err != nil || !bytes.Equal(b, relocBodyOf(i)) {
			t.Fatalf("body %d (%v): %d bytes, %v", i, k, len(b), err)
		}
	}
}

// gate is a relocator's pace that lets one step through per open.
type gate struct {
	steps chan int64
	open  chan struct{}
}

func newGate(n *relocNode) *gate {
	g := &gate{steps: make(chan int64), open: make(chan struct{})}
	n.f.paceHook = func(b int64) bool {
		select {
		case g.steps <- b:
		case <-n.closing:
			return false
		}
		select {
		case <-g.open:
			return true
		case <-n.closing:
			return false
		}
	}
	return g
}

// next waits for the relocator to come to its next step; false if it
// ended instead.
func (g *gate) next(n *relocNode) (int64, bool) {
	idle := make(chan struct{})
	go func() { n.waitIdle(); close(idle) }()
	select {
	case b := <-g.steps:
		return b, true
	case <-idle:
		return 0, false
	}
}

// A snapshot relocates one bounded step of the bodies its compaction
// needs; the rest is copied off the snapshot, a paced step at a time,
// while apply goes on, every body stays readable and the next snapshot
// is taken, and the log is compacted once the last step is durable.
func TestPersist_RelocatesTheRestInPacedStepsOffTheSnapshot(t *testing.T) {
	n := openRelocNode(t, t.TempDir())
	g := newGate(n)
	keys := n.fill(t)

	_, index := n.snapshot(t)
	// One step copied by the snapshot itself, not the backlog.
	if st := n.store.Stats(); st.RelocatedBytes > relocStepLen || st.RelocatedBodies == 0 {
		t.Fatalf("the snapshot relocated %d bodies (%d bytes); one step is at most %d bytes", st.RelocatedBodies, st.RelocatedBytes, relocStepLen)
	}
	// The relocator waits before its next step: nothing is stopped.
	if b, ok := g.next(n); !ok || b > relocStepLen || b == 0 {
		t.Fatalf("a step of %d bytes (under way: %v), want 1-%d", b, ok, relocStepLen)
	}
	checkBodies(t, n.store, keys)
	ch := &proto.ChannelRef{Node: "me", Connection: "c2", Channel: 1}
	n.append(t, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "keep", Body: []byte("later"), Channel: ch}}})
	if got := n.f.state.m.AppliedIndex(); got != index+1 {
		t.Fatalf("applied %d, want %d", got, index+1)
	}
	// A newer snapshot in the meantime: its job replaces the one under
	// way.
	_, index = n.snapshot(t)
	pin := n.store.Pin()
	for steps := 0; ; steps++ {
		if steps > relocKept {
			t.Fatal("the relocation does not end")
		}
		g.open <- struct{}{}
		b, more := g.next(n)
		if got := n.store.Pin(); got < pin {
			t.Fatalf("pin went back from %d to %d", pin, got)
		} else {
			pin = got
		}
		checkBodies(t, n.store, keys)
		if !more {
			break
		}
		if b > relocStepLen {
			t.Fatalf("a step of %d bytes, more than %d", b, relocStepLen)
		}
	}
	to := index - relocTrail
	if got := n.store.Pin(); got != to+1 {
		t.Fatalf("pin %d after the relocation, want %d", got, to+1)
	}
	if st := n.store.Stats(); st.RelocatedBodies != relocKept {
		t.Fatalf("%d bodies relocated, want %d", st.RelocatedBodies, relocKept)
	}
	if first, _ := n.logs.FirstIndex(); first != to+1 {
		t.Fatalf("log begins at %d after the relocation, want %d", first, to+1)
	}
	checkBodies(t, n.store, keys)
}

// copyDir copies what a killed process leaves on disk: every file as it
// is now.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, src); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A node killed in the middle of a paced relocation, its log compacted
// up to the steps done, restarts from its snapshot with every body the
// snapshot names readable, and its next snapshot finishes the
// relocation.
func TestPersist_KilledDuringPacedRelocationLosesNothing(t *testing.T) {
	for stepsDone := range 3 {
		t.Run(fmt.Sprint(stepsDone, "steps"), func(t *testing.T) {
			dir := t.TempDir()
			n := openRelocNode(t, filepath.Join(dir, "n"))
			g := newGate(n)
			keys := n.fill(t)
			snap, _ := n.snapshot(t)
			for range stepsDone + 1 {
				if _, ok := g.next(n); !ok {
					t.Fatal("no relocation under way after the snapshot")
				}
				if stepsDone--; stepsDone >= 0 {
					g.open <- struct{}{}
				}
			}
			// Paused before the next step.
			// The log as raft compacts it whenever it may (a snapshot by
			// entry count could come now).
			if err := n.logs.DeleteRange(1, n.store.Pin()-1); err != nil {
				t.Fatal(err)
			}
			killed := filepath.Join(dir, "killed")
			copyDir(t, filepath.Join(dir, "n"), killed)
			n.close()

			r := openRelocNode(t, killed)
			if err := r.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatalf("restart from the snapshot: %v", err)
			}
			checkBodies(t, r.store, keys)
			r.f.paceHook = func(int64) bool { return true }
			r.snapshot(t)
			r.waitIdle()
			checkBodies(t, r.store, keys)
			if first, _ := r.logs.FirstIndex(); first <= keys[len(keys)-1].Index {
				t.Fatalf("log still begins at %d, below the last relocated body's entry %d", first, keys[len(keys)-1].Index)
			}
		})
	}
}

// Bodies waiting in a delayed exchange are read as they fall due, each
// from another entry: a snapshot copies them into body files even when
// they are most of the log (holdDenseLog holds a dense log only for
// queued bodies), also those of the trailing entries raft keeps, which
// stay in the log.
func TestPersist_CopiesDelayedBodiesOutOfTheTrailingEntries(t *testing.T) {
	n := openRelocNode(t, t.TempDir())
	n.f.paceHook = func(int64) bool { return true }
	conn := &proto.ConnectionRef{Node: "me", Connection: "c1"}
	ch := &proto.ChannelRef{Node: "me", Connection: "c1", Channel: 1}
	field := func(k string, v *proto.Value) *proto.Table {
		return &proto.Table{Fields: []*proto.Field{{Key: k, Value: v}}}
	}
	n.append(t, &proto.Command{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: fsm.Protocol}}})
	n.append(t, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}})
	n.append(t, &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dx",
		Type: fsm.DelayedExchangeType, Arguments: field("x-delayed-type", &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("direct")}})}}})
	n.append(t, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Durable: true, Connection: conn}}})
	n.append(t, &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "dx", Destination: "q", RoutingKey: "k", Connection: conn}}})
	hour := &proto.Properties{Headers: field("x-delay", &proto.Value{Kind: &proto.Value_Int64{Int64: 3600_000}})}
	const held = 3 * relocTrail
	var keys []bodies.Key
	for i := range held {
		keys = append(keys, bodies.Key{Index: n.append(t, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{
			Vhost: "/", Exchange: "dx", RoutingKey: "k", Body: relocBodyOf(i), Properties: hour, Channel: ch}}})})
	}
	if got := n.f.state.m.Stats().Delayed; got != held {
		t.Fatalf("%d delayed, want %d", got, held)
	}

	_, index := n.snapshot(t)
	n.waitIdle()
	for i, k := range keys {
		if !n.store.InFile(k) {
			t.Fatalf("delayed body %d (entry %d of a snapshot at %d, %d trailing) is only in the log", i, k.Index, index, relocTrail)
		}
	}
	if first, _ := n.logs.FirstIndex(); first != index-relocTrail+1 {
		t.Fatalf("log begins at %d, want %d: raft's trailing entries stay", first, index-relocTrail+1)
	}
	checkBodies(t, n.store, keys)
}
