package fsm_test

import (
	"strings"
	"testing"

	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func prio(p uint32) *proto.Properties { return &proto.Properties{Priority: &p} }

func getAll(t *testing.T, mm func(stamp int64, c *proto.Command) *proto.Result, q string) string {
	t.Helper()
	var out []string
	for {
		r := mm(0, get(q, true))
		if r.GetGet() == nil {
			return strings.Join(out, " ")
		}
		out = append(out, string(r.GetGet().GetBody()))
	}
}

func TestMachine_PriorityOrderAndRequeue(t *testing.T) {
	m := fsmtest.New(t)
	one := func(stamp int64, c *proto.Command) *proto.Result { r, _ := fsmtest.One(t, m, stamp, c); return r }
	one(1, declare("q", table("x-max-priority", i64(5))))
	for _, p := range []struct {
		body string
		prio *proto.Properties
	}{{"a1", prio(1)}, {"b0", nil}, {"c9", prio(9)}, {"d1", prio(1)}, {"e5", prio(5)}, {"f3", prio(3)}} {
		one(1, publish("", "q", p.body, p.prio))
	}
	// A consumer with prefetch 2 gets the two highest, then hands them back.
	_, rec := fsmtest.One(t, m, 2, consume("q", "c", ch2, 2))
	if len(rec.Deliveries) != 2 || string(rec.Deliveries[0].Body) != "c9" || string(rec.Deliveries[1].Body) != "e5" {
		t.Fatalf("consumer got %v", rec.Deliveries)
	}
	one(3, cancel("c", ch2))
	one(3, requeue(ch2, 0, true))
	m = roundTrip(t, m)
	if got := getAll(t, one, "q"); got != "c9 e5 f3 a1 d1 b0" {
		t.Fatalf("basic.get order %q", got)
	}
}

func TestMachine_PriorityDropHeadAndTTL(t *testing.T) {
	m := fsmtest.New(t)
	one := func(stamp int64, c *proto.Command) *proto.Result { r, _ := fsmtest.One(t, m, stamp, c); return r }
	// RabbitMQ 3.10's classic priority queue drops the message that would
	// be delivered next (the highest priority's head) when over max-length.
	one(1, declare("d", table("x-max-priority", i64(5), "x-max-length", i64(3))))
	for _, b := range []string{"m0", "m1", "m2", "m3", "m4"} {
		one(1, publish("", "d", b, prio(map[string]uint32{"m0": 1, "m1": 5, "m2": 3, "m3": 5, "m4": 0}[b])))
	}
	if got := getAll(t, one, "d"); got != "m2 m0 m4" {
		t.Fatalf("after drop-head %q", got)
	}
	// A low-priority message with the earliest deadline dies on time even
	// though higher priorities sit in front of it.
	one(200, declare("t", table("x-max-priority", i64(2))))
	one(200, publish("", "t", "hi", prio(2)))
	one(200, publish("", "t", "lo", &proto.Properties{Priority: ptr(uint32(0)), Expiration: ptr("50")}))
	if d, ok := m.NextDeadline(); !ok || d != 250 {
		t.Fatalf("next deadline %d %v", d, ok)
	}
	one(250, expire("t"))
	if got := getAll(t, one, "t"); got != "hi" {
		t.Fatalf("after expiry %q", got)
	}
}

func TestMachine_MaxPriorityArgument(t *testing.T) {
	m := fsmtest.New(t)
	for _, c := range []struct {
		v    *proto.Value
		text string
	}{
		{i64(256), "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,256}"},
		{i64(-1), "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'q' in vhost '/': {value_negative,-1}"},
		{str("a"), `PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'q' in vhost '/': "expected integer, got longstr"`},
	} {
		r, _ := fsmtest.One(t, m, 1, declare("q", table("x-max-priority", c.v)))
		if r.GetCode() != 406 || r.GetText() != c.text {
			t.Fatalf("x-max-priority %v: %d %q", c.v, r.GetCode(), r.GetText())
		}
	}
	for _, n := range []int64{0, 1, 255} {
		if r, _ := fsmtest.One(t, m, 1, declare("ok", table("x-max-priority", i64(n)))); r.GetCode() != 0 {
			t.Fatalf("x-max-priority %d refused: %s", n, r.GetText())
		}
		fsmtest.One(t, m, 1, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "ok"}}})
	}
	fsmtest.One(t, m, 1, declare("eq", table("x-max-priority", i64(5))))
	if r, _ := fsmtest.One(t, m, 1, declare("eq", table("x-max-priority", i64(6)))); r.GetCode() != 406 || !strings.Contains(r.GetText(), "inequivalent arg 'x-max-priority'") {
		t.Fatalf("redeclare with another maximum: %d %q", r.GetCode(), r.GetText())
	}
}
