package fsm_test

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

// Every entity survives a snapshot round trip, and the restored machine
// goes on exactly like the original.
func TestMachine_SnapshotEntitiesAndContinuation(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000,
		&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "other", Description: "d"}}},
		&proto.Command{Cmd: &proto.Command_PermissionSet{PermissionSet: &proto.PermissionSet{User: "guest", Vhost: "other", Configure: "c"}}},
		exchangeDeclare("t", "topic", table("alternate-exchange", str("amq.fanout"))),
		bind("amq.direct", "t", "k", true, nil),
		declare("q", table("x-message-ttl", i64(5000), "x-dead-letter-exchange", str("amq.fanout"))),
		declare("d", table("x-expires", i64(100000))),
		bind("amq.fanout", "d", "", false, nil),
		bind("t", "q", "#", false, nil),
		policySet("p", "^q", 1, false, &proto.PolicyDefinition{MaxLength: ptr(int64(10))}),
		policySet("o", ".*", 0, true, &proto.PolicyDefinition{Expires: ptr(int64(200000))}),
	)
	for i := 0; i < 6; i++ {
		fsmtest.One(t, m, 1100+int64(i), publish("amq.direct", "k", "m", expiring("3000")))
	}
	fsmtest.Apply(t, m, 1200, consume("q", "c1", ch1, 2), consume("q", "c2", ch2, 0), get("q", false))
	fsmtest.One(t, m, 1300, cancel("c2", ch2))
	fsmtest.One(t, m, 1400, discard(ch1, 1, false))

	n := roundTrip(t, m)
	for _, check := range []func(*fsm.Machine) any{
		func(x *fsm.Machine) any { return x.Queues("") },
		func(x *fsm.Machine) any { return x.Exchanges("") },
		func(x *fsm.Machine) any { return x.Bindings("") },
		func(x *fsm.Machine) any { return x.Consumers("") },
		func(x *fsm.Machine) any { return x.Policies("", false) },
		func(x *fsm.Machine) any { return x.Policies("", true) },
		func(x *fsm.Machine) any { return x.Permissions() },
		func(x *fsm.Machine) any { return x.Vhosts() },
		func(x *fsm.Machine) any { return x.Stats() },
	} {
		a, b := check(m), check(n)
		if fmtAny(a) != fmtAny(b) {
			t.Fatalf("restored state differs:\n%v\n%v", a, b)
		}
	}
	later := []*proto.Command{settle(ch1, 2, true), requeue(ch2, 0, true), publish("t", "x", "late", nil), expire("q", "d"),
		&proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: "n1"}}}}
	ra, ea := fsmtest.Apply(t, m, 5000, later...)
	rb, eb := fsmtest.Apply(t, n, 5000, later...)
	if fmtAny(ra) != fmtAny(rb) || fmtAny(ea) != fmtAny(eb) || m.Digest() != n.Digest() {
		t.Fatal("restored machine diverged")
	}
	if err := fsm.New().Restore(bytes.NewReader([]byte("RMQSjunk"))); err == nil {
		t.Fatal("corrupt snapshot accepted")
	}
}

func fmtAny(v any) string {
	var buf bytes.Buffer
	switch x := v.(type) {
	case []*proto.Result:
		for _, r := range x {
			buf.WriteString(r.String())
		}
	case *fsmtest.Recorder:
		for _, d := range x.Deliveries {
			buf.WriteString(d.Consumer.String() + string(d.Body) + d.Properties.String())
		}
		for _, c := range x.Cancelled {
			buf.WriteString(c.String())
		}
	default:
		buf.WriteString(fmtDefault(v))
	}
	return buf.String()
}

func fmtDefault(v any) string { return fmt.Sprint(v) }

// A snapshot is the state when it was taken, though its messages are
// encoded later, while the machine goes on applying.
func TestMachine_SnapshotIsTheStateWhenTaken(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", table("x-message-ttl", i64(60000))))
	for i := 0; i < 20; i++ {
		fsmtest.One(t, m, 3, publish("", "q", "m"+strconv.Itoa(i), nil))
	}
	fsmtest.One(t, m, 4, consume("q", "c1", ch1, 5))
	want := m.Digest()
	w, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Requeue flags a delivered message, a policy moves deadlines, a
	// purge drops what is ready, and more arrive.
	fsmtest.One(t, m, 5, requeue(ch1, 0, true))
	fsmtest.One(t, m, 6, policySet("p", "^q$", 0, false, &proto.PolicyDefinition{MessageTtl: ptr(int64(1000))}))
	fsmtest.One(t, m, 7, &proto.Command{Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{Vhost: "/", Name: "q"}}})
	fsmtest.One(t, m, 8, publish("", "q", "later", nil))
	if m.Digest() == want {
		t.Fatal("the commands after the snapshot changed nothing")
	}
	if restoreFrom(t, w).Digest() != want {
		t.Fatal("the snapshot holds changes applied after it was taken")
	}
}

// From the second snapshot on, the buffer is sized from the bytes a
// message took in the one before: messages far larger than the first
// guess (long message ids here) cost no regrowth, a copy of the whole
// encoding so far under the lock.
func TestSnapshot_SizedFromTheLastOne(t *testing.T) {
	snapAllocs := func(id string) float64 {
		m := fsmtest.New(t)
		fsmtest.One(t, m, 2, declare("q", nil))
		var batch []*proto.Command
		for j := range 20000 {
			batch = append(batch, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: []byte("b"),
				Properties: &proto.Properties{MessageId: ptr(fmt.Sprintf(id, j))}}}})
			if len(batch) == 1000 {
				fsmtest.Apply(t, m, 3, batch...)
				batch = batch[:0]
			}
		}
		w, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		w.(fsm.Releaser).Release()
		return testing.AllocsPerRun(2, func() {
			w, err := m.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			w.(fsm.Releaser).Release()
		})
	}
	short, long := snapAllocs("%d"), snapAllocs("%0300d")
	if long > short {
		t.Fatalf("a snapshot of messages with 300-byte ids made %v allocations, with short ids %v: its buffer grew", long, short)
	}
}

// A large snapshot's encoding is outside the heap: taking it grows the
// heap by little more than its list of bodies, what it writes restores
// the same state, and Release gives it back.
func TestSnapshot_LargeEncodingOutsideTheHeap(t *testing.T) {
	const n = 200_000
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", nil))
	fill(m, "q", n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	names := int64(n * unsafe.Sizeof(queue.Body{}))
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc) - names; grew > int64(buf.Len())/4 {
		t.Fatalf("a snapshot of %d bytes grew the heap by %d bytes beyond its list of bodies", buf.Len(), grew)
	}
	if got := len(fsm.Bodies(w.(fsm.BodyLister))); got != n {
		t.Fatalf("%d bodies listed", got)
	}
	if restoreBytes(t, buf.Bytes()).Digest() != m.Digest() {
		t.Fatal("digest differs after the round trip")
	}
	w.(fsm.Releaser).Release()
	if got := len(fsm.Bodies(w.(fsm.BodyLister))); got != 0 {
		t.Fatalf("%d bodies listed after Release", got)
	}
}

// A snapshot lists its bodies into one list allocated at its size: a
// backlog's snapshot lists millions, beside the applies, and the list
// grown by doubling was most of what the node allocated for it.
func TestSnapshot_BodiesListedInOneAllocation(t *testing.T) {
	const n = 50_000
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", nil))
	fill(m, "q", n)
	w, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer w.(fsm.Releaser).Release()
	bl := w.(fsm.BodyLister)
	allocs := testing.AllocsPerRun(3, func() {
		if got := len(fsm.Bodies(bl)); got != n {
			t.Fatalf("%d bodies listed, want %d", got, n)
		}
	})
	// The list, and the walk's closures called through the interface: a
	// few whatever n. A list grown by doubling makes 28 at this size.
	if allocs > 6 {
		t.Fatalf("listing %d bodies made %v allocations", n, allocs)
	}
}
