package fsm

import (
	"bytes"
	"math/rand"
	"testing"

	pb "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/raftmq/raftmq/proto"
)

// fuzzBase is a machine with some of everything: vhosts, a user, queues
// with messages and dead-lettering, bindings, a policy, consumers with
// unacked deliveries.
func fuzzBase(t testing.TB) *Machine {
	t.Helper()
	m := New()
	r := rand.New(rand.NewSource(1))
	cmds := []*proto.Command{
		{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{Name: "guest"}}},
		{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dlx", Type: "fanout"}}},
	}
	for range 200 {
		cmds = append(cmds, randomCommand(r))
	}
	for i, c := range cmds {
		m.Apply(Entry{Index: uint64(i + 1), Envelope: &proto.Envelope{Version: 1, StampMs: int64(i), Commands: []*proto.Command{c}}}, nil)
	}
	return m
}

// applyChecked applies c to m as the next entry and checks what must hold
// whatever the command: apply does not panic (the caller's frame fails
// the test), the state survives a snapshot round trip, and a replica
// that decodes the command's encoding ends in the same state as one
// that applies the command itself (the leader's case).
func applyChecked(t *testing.T, m *Machine, c *proto.Command) []*proto.Result {
	t.Helper()
	e := Entry{Index: m.AppliedIndex() + 1, Envelope: &proto.Envelope{Version: 1, StampMs: m.Clock() + 7, Commands: []*proto.Command{c}}}
	if CheckEntry(e) != nil {
		return nil // the node stops before applying it
	}
	twin := New()
	if err := twin.Restore(bytes.NewReader(m.encode())); err != nil {
		t.Fatalf("restore: %v", err)
	}
	res := m.Apply(e, &countSink{})
	if b, err := pb.Marshal(c); err == nil {
		dc := &proto.Command{}
		if err := pb.Unmarshal(b, dc); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		twin.Apply(Entry{Index: e.Index, Envelope: &proto.Envelope{Version: 1, StampMs: e.Envelope.StampMs, Commands: []*proto.Command{dc}}}, &countSink{})
		if twin.Digest() != m.Digest() {
			t.Fatalf("the decoded command left another state than the command (%v)", c)
		}
	}
	n := New()
	if err := n.Restore(bytes.NewReader(m.encode())); err != nil {
		t.Fatalf("snapshot of the state does not restore: %v", err)
	}
	if n.Digest() != m.Digest() {
		t.Fatal("digest differs after a snapshot round trip")
	}
	return res
}

// TestApply_RandomMutations applies commands of a random workload whose
// encodings are randomly damaged; apply must never panic, whether or not
// Validate accepts what came out.
func TestApply_RandomMutations(t *testing.T) {
	r := rand.New(rand.NewSource(16))
	m := fuzzBase(t)
	accepted, refused := 0, 0
	for range 3000 {
		b, err := pb.Marshal(randomCommand(r))
		if err != nil {
			t.Fatal(err)
		}
		b = mutate(r, b)
		c := &proto.Command{}
		if pb.Unmarshal(b, c) != nil {
			continue
		}
		if Validate(c, Limits{}) == nil {
			accepted++
		} else {
			refused++
		}
		applyChecked(t, m, c)
		checkConservation(t, m)
	}
	if accepted == 0 || refused == 0 {
		t.Fatalf("mutations gave %d valid and %d invalid commands: the test exercises one side only", accepted, refused)
	}
}

// mutate damages an encoding: flips, deletes, duplicates or inserts bytes.
func mutate(r *rand.Rand, b []byte) []byte {
	for range 1 + r.Intn(3) {
		if len(b) == 0 {
			return []byte{byte(r.Intn(256))}
		}
		i := r.Intn(len(b))
		switch r.Intn(4) {
		case 0:
			b[i] ^= byte(1 << r.Intn(8))
		case 1:
			b = append(b[:i:i], b[i+1:]...)
		case 2:
			j := i + r.Intn(len(b)-i)
			b = append(b[:j:j], append(bytes.Clone(b[i:j]), b[j:]...)...)
		default:
			b = append(b[:i:i], append([]byte{byte(r.Intn(256))}, b[i:]...)...)
		}
	}
	return b
}

// FuzzApply decodes arbitrary bytes as a Command, validates it and applies
// it to a populated machine: neither may panic, and the checks of
// applyChecked hold.
func FuzzApply(f *testing.F) {
	f.Add([]byte{})
	r := rand.New(rand.NewSource(2))
	for range 64 {
		b, _ := pb.Marshal(randomCommand(r))
		f.Add(b)
	}
	oneof := (&proto.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("cmd").Fields()
	for i := 0; i < oneof.Len(); i++ {
		c := &proto.Command{}
		m := c.ProtoReflect()
		fd := oneof.Get(i)
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		b, _ := pb.Marshal(c)
		f.Add(b)
	}
	base := fuzzBase(f).encode()
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &proto.Command{}
		if pb.Unmarshal(b, c) != nil {
			return
		}
		_ = Validate(c, Limits{MaxBody: 1 << 10})
		m := New()
		if err := m.Restore(bytes.NewReader(base)); err != nil {
			t.Fatal(err)
		}
		applyChecked(t, m, c)
		checkConservation(t, m)
	})
}
