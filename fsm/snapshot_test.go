package fsm_test

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
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
