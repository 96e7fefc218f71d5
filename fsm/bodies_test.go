package fsm_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

func snapshotBytes(t *testing.T, m *fsm.Machine) ([]byte, []queue.Body) {
	t.Helper()
	w, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), fsm.Bodies(w.(fsm.BodyLister))
}

// A snapshot holds each message's metadata and the name of its body, not
// the body: its size does not grow with the bytes queued.
func TestSnapshot_HoldsNoBodies(t *testing.T) {
	size := func(body int) int {
		m := fsmtest.New(t)
		fsmtest.One(t, m, 2, declare("q", nil))
		for i := range 100 {
			fsmtest.One(t, m, int64(3+i), publish("", "q", strings.Repeat("x", body), nil))
		}
		b, _ := snapshotBytes(t, m)
		return len(b)
	}
	small, large := size(10), size(10_000)
	if large > small+100 {
		t.Fatalf("snapshot of 100 messages: %d bytes with 10-byte bodies, %d with 10,000-byte bodies", small, large)
	}
}

// Bodies names each body once, however many queues hold a copy of it and
// whether it is ready, unacknowledged or dead-lettered, in log order.
func TestSnapshot_BodiesNamedOnce(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, exchangeDeclare("fan", "fanout", nil))
	fsmtest.One(t, m, 2, declare("dead", nil))
	fsmtest.One(t, m, 2, declare("a", table("x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dead"))))
	fsmtest.One(t, m, 2, declare("b", nil))
	fsmtest.One(t, m, 2, bind("fan", "a", "", false, nil))
	fsmtest.One(t, m, 2, bind("fan", "b", "", false, nil))
	res, _ := fsmtest.Apply(t, m, 3, publish("fan", "", "one", nil), publish("fan", "", "two", nil))
	first := res[0].GetIndex()
	fsmtest.One(t, m, 4, publish("fan", "", "three", nil))
	// "one" is delivered from a and rejected into dead; "two" is held
	// unacknowledged by a consumer of b.
	if r, _ := fsmtest.One(t, m, 5, get("a", false)); string(r.GetGet().GetBody()) != "one" {
		t.Fatalf("get: %v", r)
	}
	fsmtest.One(t, m, 6, discard(ch1, 1, false))
	fsmtest.One(t, m, 7, consume("b", "c", ch2, 2))
	_, bodies := snapshotBytes(t, m)
	want := fmt.Sprint([]queue.Body{{Index: first, Pos: 0, Size: 3}, {Index: first, Pos: 1, Size: 3}, {Index: first + 1, Pos: 0, Size: 5}})
	if got := fmt.Sprint(bodies); got != want {
		t.Fatalf("bodies %s, want %s", got, want)
	}
	if r, _ := fsmtest.One(t, m, 8, get("dead", true)); string(r.GetGet().GetBody()) != "one" {
		t.Fatalf("dead-lettered body %q", r.GetGet().GetBody())
	}
}

// A snapshot in a format that held bodies (before 7) restores them
// inline; the restored machine delivers them without the log entries that
// published them, and its next snapshot keeps them.
func TestSnapshot_InlineBodiesFromFormat6(t *testing.T) {
	// Level 6: a format-6 snapshot cannot say that a queue was declared
	// at level 8.
	m := fsmtest.NewAt(t, 6)
	fsmtest.One(t, m, 2, declare("q", nil))
	fsmtest.One(t, m, 3, publish("", "q", "kept", &proto.Properties{MessageId: ptr("m1")}))
	b, err := fsm.SnapshotAs(m, 6, m.ProtocolLevel())
	if err != nil {
		t.Fatal(err)
	}
	n := restoreBytes(t, b)
	if n.Digest() != m.Digest() {
		t.Fatal("digest differs after a restore from format 6")
	}
	n = roundTrip(t, n)
	if _, bodies := snapshotBytes(t, n); len(bodies) != 0 {
		t.Fatalf("inline bodies listed as named: %v", bodies)
	}
	r := &fsmtest.Recorder{}
	n.Apply(fsm.Entry{Index: n.AppliedIndex() + 1, Envelope: &proto.Envelope{Version: 1, StampMs: 4,
		Commands: []*proto.Command{consume("q", "c", ch1, 1)}}}, r)
	if len(r.Deliveries) != 1 || string(r.Deliveries[0].Body) != "kept" || r.Deliveries[0].Properties.GetMessageId() != "m1" {
		t.Fatalf("deliveries %v", r.Deliveries)
	}
}

// A message restored inline keeps its bytes when it is dead-lettered.
func TestSnapshot_InlineBodyDeadLettered(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("dead", nil))
	fsmtest.One(t, m, 2, declare("q", table("x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dead"))))
	fsmtest.One(t, m, 3, publish("", "q", "kept", nil))
	b, err := fsm.SnapshotAs(m, 6, m.ProtocolLevel())
	if err != nil {
		t.Fatal(err)
	}
	n := restoreBytes(t, b)
	fsmtest.Apply(t, n, 4, get("q", false))
	fsmtest.Apply(t, n, 5, discard(ch1, 1, false))
	res, _ := fsmtest.Apply(t, n, 6, get("dead", true))
	if g := res[0].GetGet(); string(g.GetBody()) != "kept" {
		t.Fatalf("dead-lettered inline body %q", g.GetBody())
	}
}
