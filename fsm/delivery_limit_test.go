package fsm_test

import (
	"os"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func deliveryCount(t *testing.T, d *fsm.Delivery) int64 {
	t.Helper()
	v, ok := tableLookup(d.Properties.GetHeaders(), "x-delivery-count")
	if !ok {
		return 0
	}
	return v.GetInt64()
}

// The case: limit 2, a dead-letter exchange and a consumer that
// rejects with requeue: delivered three times, then dead-lettered with
// reason delivery_limit. (From level 8 a nack counts no failed attempt:
// retry_test.go.)
func TestMachine_DeliveryLimitDeadLetters(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1, exchangeDeclare("dlx", "fanout", nil), declare("dead", nil), bind("dlx", "dead", "", false, nil),
		declare("q", table("x-delivery-limit", i64(2), "x-dead-letter-exchange", str("dlx"))))
	fsmtest.One(t, m, 2, publish("", "q", "poison", nil))
	_, rec := fsmtest.One(t, m, 3, consume("q", "c", ch2, 1))
	var counts []int64
	for tag := uint64(1); len(rec.Deliveries) == 1 && tag <= 10; tag++ {
		d := rec.Deliveries[0]
		if d.DeliveryTag != tag {
			t.Fatalf("delivery tag %d, want %d", d.DeliveryTag, tag)
		}
		counts = append(counts, deliveryCount(t, d))
		m = roundTrip(t, m) // the count is state: it survives a snapshot
		_, rec = fsmtest.One(t, m, 4, reject(ch2, tag))
	}
	if len(counts) != 3 || counts[0] != 0 || counts[1] != 1 || counts[2] != 2 {
		t.Fatalf("x-delivery-count of the deliveries %v, want [0 1 2]", counts)
	}
	if ready(t, m, "q") != 0 || ready(t, m, "dead") != 1 {
		t.Fatalf("q %d dead %d", ready(t, m, "q"), ready(t, m, "dead"))
	}
	r, _ := fsmtest.One(t, m, 5, get("dead", true))
	if got := deathOf(t, r.GetGet().GetProperties())["reason"]; string(got.GetLongString()) != "delivery_limit" {
		t.Fatalf("x-death reason %v", got)
	}
}

func TestMachine_DeliveryLimitDefaultPolicyAndUnseen(t *testing.T) {
	m := fsmtest.New(t)
	// Default 20: the 21st return drops the message (no dead-letter exchange).
	fsmtest.Apply(t, m, 1, declare("def", nil), publish("", "def", "x", nil))
	for i := 0; i < 21; i++ {
		r, _ := fsmtest.One(t, m, 2, get("def", false))
		if r.GetGet() == nil {
			t.Fatalf("gone after %d returns", i)
		}
		if i == 20 {
			// Unseen returns (a node handing back what its client never
			// saw) do not count.
			unseen := reject(ch1, r.GetGet().GetDeliveryTag())
			unseen.GetRequeue().Unseen = true
			fsmtest.One(t, m, 2, unseen)
			if ready(t, m, "def") != 1 {
				t.Fatal("an unseen return counted")
			}
			r, _ = fsmtest.One(t, m, 2, get("def", false))
		}
		fsmtest.One(t, m, 2, reject(ch1, r.GetGet().GetDeliveryTag()))
	}
	if n := ready(t, m, "def"); n != 0 {
		t.Fatalf("default limit: %d ready after 21 returns", n)
	}
	// -1 lifts the limit; a policy sets one; the argument wins over it.
	fsmtest.Apply(t, m, 3, policySet("p", "^pol", 0, false, &proto.PolicyDefinition{DeliveryLimit: ptr(int64(1))}),
		declare("none", table("x-delivery-limit", i64(-1))), declare("pol", nil), declare("pol-arg", table("x-delivery-limit", i64(3))))
	for _, c := range []struct {
		q       string
		returns int
	}{{"none", 50}, {"pol", 1}, {"pol-arg", 3}} {
		fsmtest.One(t, m, 4, publish("", c.q, "x", nil))
		for i := 0; i < c.returns; i++ {
			r, _ := fsmtest.One(t, m, 4, get(c.q, false))
			fsmtest.One(t, m, 4, reject(ch1, r.GetGet().GetDeliveryTag()))
		}
		if ready(t, m, c.q) != 1 {
			t.Fatalf("%s: gone after %d returns", c.q, c.returns)
		}
		r, _ := fsmtest.One(t, m, 4, get(c.q, false))
		fsmtest.One(t, m, 4, reject(ch1, r.GetGet().GetDeliveryTag()))
		if want := map[string]uint64{"none": 1}[c.q]; ready(t, m, c.q) != want {
			t.Fatalf("%s: %d ready after %d returns", c.q, ready(t, m, c.q), c.returns+1)
		}
	}
	if r, _ := fsmtest.One(t, m, 5, policySet("bad", "x", 0, false, &proto.PolicyDefinition{DeliveryLimit: ptr(int64(-2))})); r.GetCode() != 406 {
		t.Fatalf("delivery-limit -2 accepted: %v", r)
	}
	if r, _ := fsmtest.One(t, m, 5, declare("bad", table("x-delivery-limit", str("a")))); r.GetCode() != 406 {
		t.Fatalf("x-delivery-limit 'a' accepted: %v", r)
	}
}

// A channel that closes with the message unacked returns it: that counts.
func TestMachine_DeliveryLimitCountsChannelClose(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1, declare("q", table("x-delivery-limit", i64(1))), publish("", "q", "x", nil))
	for i := 0; i < 2; i++ {
		fsmtest.One(t, m, 2, consume("q", "c", ch2, 1))
		fsmtest.One(t, m, 2, &proto.Command{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch2}}})
	}
	if n := ready(t, m, "q"); n != 0 {
		t.Fatalf("%d ready after two returns past limit 1", n)
	}
}

// A snapshot written before delivery counts and queue features existed
// (format 2, level 1; its queue has x-max-priority 3, then ignored) still
// loads, and its queue keeps the behaviour it had: no delivery count,
// whatever level the log reaches later.
func TestMachine_RestoresFormat2Snapshot(t *testing.T) {
	f, err := os.Open("testdata/snapshot-v2.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := fsm.New()
	if err := m.Restore(f); err != nil {
		t.Fatal(err)
	}
	if qi, ok := m.Queue("/", "q"); !ok || qi.GetReady() != 2 || qi.GetUnacked() != 1 {
		t.Fatalf("restored queue %v", qi)
	}
	fsmtest.One(t, m, 10, fsmtest.SetProtocol(fsm.Protocol))
	_, rec := fsmtest.One(t, m, 11, requeue(ch1, 1, false))
	if len(rec.Deliveries) != 1 || string(rec.Deliveries[0].Body) != "a" || deliveryCount(t, rec.Deliveries[0]) != 0 {
		t.Fatalf("after restore and requeue: %v", rec.Deliveries)
	}
	roundTrip(t, m)
}
