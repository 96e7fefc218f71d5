package fsm_test

import (
	"fmt"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func nack(ch *proto.ChannelRef, tag uint64) *proto.Command { return requeue(ch, tag, false) }

func release() *proto.Command { return fsmtest.ReleaseDelayed(fsm.DelayedReleaseBatch) }

func header(t *testing.T, p *proto.Properties, k string) int64 {
	t.Helper()
	v, ok := tableLookup(p.GetHeaders(), k)
	if !ok {
		return 0
	}
	return v.GetInt64()
}

func queueInfo(t *testing.T, m *fsm.Machine, q string) *proto.QueueInfo {
	t.Helper()
	qi, ok := m.Queue("/", q)
	if !ok {
		t.Fatalf("queue %q missing", q)
	}
	return qi
}

// getTag takes the queue's head with basic.get on ch1 and returns its tag
// and properties; it fails when nothing is ready.
func getTag(t *testing.T, m *fsm.Machine, stamp int64, q string) (uint64, *proto.Properties) {
	t.Helper()
	r, _ := fsmtest.One(t, m, stamp, get(q, false))
	if r.GetGet() == nil {
		t.Fatalf("nothing ready in %s at %d: %v", q, stamp, r)
	}
	return r.GetGet().GetDeliveryTag(), r.GetGet().GetProperties()
}

// waitsFor checks that q's one message waits and is released at due, not
// before: at due-1 a release changes nothing, at due it is ready.
func waitsFor(t *testing.T, m *fsm.Machine, q string, due int64) {
	t.Helper()
	qi := queueInfo(t, m, q)
	if qi.GetReady() != 0 || qi.GetMessagesDelayed() != 1 || qi.GetNextRetryDueMs() != due {
		t.Fatalf("%s: ready %d delayed %d due %d, want 0, 1, %d", q, qi.GetReady(), qi.GetMessagesDelayed(), qi.GetNextRetryDueMs(), due)
	}
	if got, _, ok := m.NextRelease(); !ok || got != due {
		t.Fatalf("NextRelease %d %v, want %d", got, ok, due)
	}
	fsmtest.One(t, m, due-1, release())
	if qi := queueInfo(t, m, q); qi.GetReady() != 0 || qi.GetMessagesDelayed() != 1 {
		t.Fatalf("%s released before its due time: %v", q, qi)
	}
	fsmtest.One(t, m, due, release())
	if qi := queueInfo(t, m, q); qi.GetReady() != 1 || qi.GetMessagesDelayed() != 0 {
		t.Fatalf("%s not released at its due time: %v", q, qi)
	}
}

// Each retry type delays the returns it names: reject is a failed
// attempt, nack is not.
func TestRetry_Types(t *testing.T) {
	for _, c := range []struct {
		typ                    string
		rejectWaits, nackWaits bool
	}{{"all", true, true}, {"failed", true, false}, {"returned", false, true}, {"disabled", false, false}} {
		t.Run(c.typ, func(t *testing.T) {
			m := fsmtest.New(t)
			fsmtest.Apply(t, m, 1000, declare("q", table("x-delayed-retry-type", str(c.typ), "x-delayed-retry-min", i64(500))),
				publish("", "q", "x", nil))
			for _, s := range []struct {
				how   string
				cmd   func(uint64) *proto.Command
				waits bool
			}{{"reject", func(tag uint64) *proto.Command { return reject(ch1, tag) }, c.rejectWaits},
				{"nack", func(tag uint64) *proto.Command { return nack(ch1, tag) }, c.nackWaits}} {
				now := m.Clock() + 1
				tag, _ := getTag(t, m, now, "q")
				fsmtest.One(t, m, now, s.cmd(tag))
				if !s.waits {
					if n := ready(t, m, "q"); n != 1 {
						t.Fatalf("%s: %d ready right after it, want 1", s.how, n)
					}
					continue
				}
				// delivery-count is 1 after the reject, 0 after a nack:
				// both wait min x max(count, 1) = 500.
				waitsFor(t, m, "q", now+500)
			}
		})
	}
}

// min x delivery-count, capped at max; a nack (no failed attempt) waits
// min whatever came before.
func TestRetry_LinearMinMax(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, declare("q", table("x-delayed-retry-type", str("all"), "x-delayed-retry-min", i64(1000),
		"x-delayed-retry-max", i64(2500), "x-delivery-limit", i64(-1))), publish("", "q", "x", nil))
	var got []int64
	for i := 0; i < 4; i++ {
		now := m.Clock() + 1
		tag, _ := getTag(t, m, now, "q")
		fsmtest.One(t, m, now, reject(ch1, tag))
		_, due := queueInfo(t, m, "q"), queueInfo(t, m, "q").GetNextRetryDueMs()
		got = append(got, due-now)
		waitsFor(t, m, "q", due)
	}
	now := m.Clock() + 1
	tag, _ := getTag(t, m, now, "q")
	fsmtest.One(t, m, now, nack(ch1, tag))
	got = append(got, queueInfo(t, m, "q").GetNextRetryDueMs()-now)
	if fmt.Sprint(got) != "[1000 2000 2500 2500 2500]" {
		t.Fatalf("delays %v, want [1000 2000 2500 2500 2500]", got)
	}
}

// x-delayed-retry-multiplier: min x mult^(count-1), capped at max
// (LavinMQ's exponential back-off); a policy sets the keys the arguments
// leave out.
func TestRetry_MultiplierAndPolicy(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, policySet("p", "^q$", 0, false, &proto.PolicyDefinition{DelayedRetryType: ptr("failed"),
		DelayedRetryMin: ptr(int64(1)), DelayedRetryMax: ptr(int64(1000))}),
		declare("q", table("x-delayed-retry-min", i64(100), "x-delayed-retry-multiplier", i64(3), "x-delivery-limit", i64(-1))),
		publish("", "q", "x", nil))
	var got []int64
	for i := 0; i < 5; i++ {
		now := m.Clock() + 1
		tag, _ := getTag(t, m, now, "q")
		fsmtest.One(t, m, now, reject(ch1, tag))
		due := queueInfo(t, m, "q").GetNextRetryDueMs()
		got = append(got, due-now)
		waitsFor(t, m, "q", due)
	}
	if fmt.Sprint(got) != "[100 300 900 1000 1000]" {
		t.Fatalf("delays %v, want [100 300 900 1000 1000]", got)
	}
}

// acquired-count and delivery-count as RabbitMQ 4.3 documents them for
// AMQP 0-9-1: nack counts a return only, reject and a channel close a
// failed attempt too, a node declared down and a consumer timeout a
// return only. The delivery limit is on delivery-count.
func TestRetry_CountsAndDeliveryLimit(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, exchangeDeclare("dlx", "fanout", nil), declare("dead", nil), bind("dlx", "dead", "", false, nil),
		declare("q", table("x-delivery-limit", i64(2), "x-dead-letter-exchange", str("dlx"))), publish("", "q", "x", nil))
	closeCh := &proto.Command{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch2}}}
	nodeDown := &proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: ch2.GetNode()}}}
	type counts struct{ acquired, delivery int64 }
	var seen []counts
	// by basic.get on ch1, handed back with ret
	viaGet := func(ret func(ch *proto.ChannelRef, tag uint64) *proto.Command) {
		t.Helper()
		now := m.Clock() + 1
		tag, p := getTag(t, m, now, "q")
		seen = append(seen, counts{header(t, p, "x-acquired-count"), header(t, p, "x-delivery-count")})
		fsmtest.One(t, m, now, ret(ch1, tag))
		m = roundTrip(t, m)
	}
	// by a consumer on ch2, whose channel then goes with end
	viaConsumer := func(end *proto.Command) {
		t.Helper()
		now := m.Clock() + 1
		_, rec := fsmtest.One(t, m, now, consume("q", "c", ch2, 1))
		if len(rec.Deliveries) != 1 {
			t.Fatalf("step %d: %d deliveries", len(seen), len(rec.Deliveries))
		}
		p := rec.Deliveries[0].Properties
		seen = append(seen, counts{header(t, p, "x-acquired-count"), header(t, p, "x-delivery-count")})
		fsmtest.One(t, m, now+10, end)
		m = roundTrip(t, m)
	}
	viaGet(nack)
	viaGet(nack)
	viaConsumer(nodeDown)
	viaConsumer(fsmtest.ConsumerTimeout(ch2, 1))
	viaGet(reject)
	viaConsumer(closeCh)
	want := []counts{{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 0}, {5, 1}}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("(acquired, delivery) counts %v, want %v", seen, want)
	}
	// Seven returns, two failed: within limit 2. The third failure is past it.
	if n := ready(t, m, "q"); n != 1 {
		t.Fatalf("%d ready after two failed attempts, limit 2", n)
	}
	tag, _ := getTag(t, m, m.Clock()+1, "q")
	fsmtest.One(t, m, m.Clock(), reject(ch1, tag))
	if ready(t, m, "q") != 0 || ready(t, m, "dead") != 1 {
		t.Fatalf("q %d dead %d after the third failure", ready(t, m, "q"), ready(t, m, "dead"))
	}
	r, _ := fsmtest.One(t, m, m.Clock(), get("dead", true))
	if got := deathOf(t, r.GetGet().GetProperties())["reason"]; string(got.GetLongString()) != "delivery_limit" {
		t.Fatalf("x-death reason %v", got)
	}
}

// The delivery limit comes before the delay: a message past it is
// dead-lettered, not delayed. Unseen returns count nothing.
func TestRetry_LimitBeforeDelayAndUnseen(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, declare("q", table("x-delayed-retry-type", str("all"), "x-delayed-retry-min", i64(100), "x-delivery-limit", i64(0))),
		publish("", "q", "x", nil))
	tag, _ := getTag(t, m, 1001, "q")
	unseen := reject(ch1, tag)
	unseen.GetRequeue().Unseen = true
	fsmtest.One(t, m, 1001, unseen)
	if qi := queueInfo(t, m, "q"); qi.GetReady() != 1 || qi.GetMessagesDelayed() != 0 {
		t.Fatalf("unseen return delayed or dropped: %v", qi)
	}
	tag, _ = getTag(t, m, 1002, "q")
	fsmtest.One(t, m, 1002, reject(ch1, tag))
	if qi := queueInfo(t, m, "q"); qi.GetReady() != 0 || qi.GetMessagesDelayed() != 0 {
		t.Fatalf("a message past its limit waits: %v", qi)
	}
}

// Waiting messages are state: a snapshot holds them (and the digest), a
// replica restored from it and one that replayed release them alike;
// deleting or purging the queue drops them; one whose TTL ran out while
// it waited dies at its release.
func TestRetry_SnapshotPurgeDeleteTTL(t *testing.T) {
	m := fsmtest.New(t)
	replay := fsmtest.New(t)
	both := func(stamp int64, c *proto.Command) *proto.Result {
		t.Helper()
		r, _ := fsmtest.One(t, m, stamp, c)
		fsmtest.One(t, replay, stamp, c)
		return r
	}
	both(1000, declare("q", table("x-delayed-retry-type", str("all"), "x-delayed-retry-min", i64(300))))
	both(1000, declare("p", table("x-delayed-retry-type", str("all"), "x-delayed-retry-min", i64(300))))
	both(1000, declare("t", table("x-delayed-retry-type", str("all"), "x-delayed-retry-min", i64(300), "x-message-ttl", i64(200))))
	for _, q := range []string{"q", "p", "t"} {
		both(1000, publish("", q, q, nil))
		r := both(1001, get(q, false))
		both(1001, reject(ch1, r.GetGet().GetDeliveryTag()))
	}
	restored := roundTrip(t, m)
	if restored.Digest() != replay.Digest() {
		t.Fatal("restored and replayed replicas differ")
	}
	fsmtest.One(t, m, 1002, &proto.Command{Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{Vhost: "/", Name: "p"}}})
	if qi := queueInfo(t, m, "p"); qi.GetMessagesDelayed() != 0 {
		t.Fatalf("purge left %d waiting", qi.GetMessagesDelayed())
	}
	// A message waiting is content: delete if-empty refuses.
	if r, _ := fsmtest.One(t, m, 1002, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "q", IfEmpty: true}}}); r.GetCode() != 406 {
		t.Fatalf("delete if-empty of a queue whose message waits: %v", r)
	}
	fsmtest.One(t, m, 1002, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "q"}}})
	fsmtest.One(t, restored, 1301, release())
	fsmtest.One(t, replay, 1301, release())
	if restored.Digest() != replay.Digest() {
		t.Fatal("restored and replayed replicas differ after the release")
	}
	if ready(t, restored, "q") != 1 || ready(t, restored, "t") != 0 || restored.Stats().Expired == 0 {
		t.Fatalf("after release: q %d t %d expired %d", ready(t, restored, "q"), ready(t, restored, "t"), restored.Stats().Expired)
	}
	fsmtest.One(t, m, 1301, release())
	if _, _, ok := m.NextRelease(); ok {
		t.Fatal("a deleted queue's message still waits")
	}
}

// Level gate: a queue declared below level 8 keeps today's behaviour (a
// return is ready at once, a nack counts towards the limit in
// x-delivery-count), even after the log reaches 9, where a new queue
// waits; a replica replaying across the SetProtocol agrees with one
// restored from a snapshot.
func TestRetry_LevelGate(t *testing.T) {
	m := fsmtest.NewAt(t, 6)
	args := table("x-delayed-retry-type", str("all"), "x-delayed-retry-min", i64(300), "x-delivery-limit", i64(1))
	fsmtest.Apply(t, m, 1000, declare("old", args), publish("", "old", "x", nil))
	check := func(stamp int64) {
		t.Helper()
		tag, p := getTag(t, m, stamp, "old")
		if header(t, p, "x-acquired-count") != 0 {
			t.Fatal("x-acquired-count on a queue declared below level 8")
		}
		fsmtest.One(t, m, stamp, nack(ch1, tag))
	}
	check(1001)
	if n := ready(t, m, "old"); n != 1 {
		t.Fatalf("level 6: %d ready after a nack", n)
	}
	fsmtest.One(t, m, 1002, fsmtest.SetProtocol(fsm.Protocol))
	m = roundTrip(t, m)
	if _, p := getTag(t, m, 1003, "old"); header(t, p, "x-delivery-count") != 1 {
		t.Fatal("old queue: the nack did not count in x-delivery-count")
	}
	fsmtest.One(t, m, 1003, nack(ch1, 2))
	// Limit 1, two nacks: dropped, as below level 8.
	if n := ready(t, m, "old"); n != 0 {
		t.Fatalf("old queue after the level: %d ready after two nacks past limit 1", n)
	}
	fsmtest.Apply(t, m, 1004, declare("new", args), publish("", "new", "x", nil))
	tag, _ := getTag(t, m, 1005, "new")
	fsmtest.One(t, m, 1005, nack(ch1, tag))
	waitsFor(t, m, "new", 1305)
	// Arguments the new level refuses are ignored on an old queue.
	m2 := fsmtest.NewAt(t, 6)
	if r, _ := fsmtest.One(t, m2, 1, declare("x", table("x-delayed-retry-type", str("bogus")))); r.GetCode() != 0 {
		t.Fatalf("level 6 refused an unknown x- argument: %v", r)
	}
	if r, _ := fsmtest.One(t, m2, 2, release()); r.GetCode() != 0 {
		t.Fatal(r)
	}
}

// Arguments and policy keys are checked as RabbitMQ checks its own: 406
// with the argument and the value.
func TestRetry_Validation(t *testing.T) {
	m := fsmtest.New(t)
	for _, c := range []struct {
		args *proto.Table
		text string
	}{
		{table("x-delayed-retry-type", str("bogus")), "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-type' for queue 'q' in vhost '/': {unknown_delayed_retry_type,<<\"bogus\">>}"},
		{table("x-delayed-retry-type", i64(1)), "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-type' for queue 'q' in vhost '/': {unacceptable_type,long}"},
		{table("x-delayed-retry-min", str("5")), "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-min' for queue 'q' in vhost '/': \"expected integer, got longstr\""},
		{table("x-delayed-retry-max", i64(-1)), "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-max' for queue 'q' in vhost '/': {value_negative,-1}"},
		{table("x-delayed-retry-multiplier", i64(0)), "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-multiplier' for queue 'q' in vhost '/': {value_zero,0}"},
		{table("x-delayed-retry-min", i64(1<<32)), "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-min' for queue 'q' in vhost '/': {value_too_large,4294967296}"},
	} {
		r, _ := fsmtest.One(t, m, 1, declare("q", c.args))
		if r.GetCode() != 406 || r.GetText() != c.text {
			t.Errorf("%v: %d %q, want 406 %q", c.args, r.GetCode(), r.GetText(), c.text)
		}
	}
	fsmtest.One(t, m, 1, declare("q", table("x-delayed-retry-type", str("all"), "x-delayed-retry-min", i64(5))))
	if r, _ := fsmtest.One(t, m, 1, declare("q", table("x-delayed-retry-type", str("all"), "x-delayed-retry-min", i64(6)))); r.GetCode() != 406 {
		t.Fatalf("inequivalent x-delayed-retry-min accepted: %v", r)
	}
	for _, d := range []*proto.PolicyDefinition{{DelayedRetryType: ptr("x")}, {DelayedRetryMin: ptr(int64(-1))}, {DelayedRetryMultiplier: ptr(int64(0))}} {
		if r, _ := fsmtest.One(t, m, 1, policySet("bad", ".*", 0, false, d)); r.GetCode() != 406 {
			t.Errorf("policy %v accepted: %v", d, r)
		}
	}
	rej := reject(ch1, 1)
	if got := fsm.CommandProtocol(rej); got != fsm.RetryLevel {
		t.Fatalf("Requeue.failed needs level %d, want %d", got, fsm.RetryLevel)
	}
	if got := fsm.CommandProtocol(policySet("p", ".*", 0, false, &proto.PolicyDefinition{DelayedRetryMin: ptr(int64(1))})); got != fsm.RetryLevel {
		t.Fatalf("a delayed-retry policy needs level %d, want %d", got, fsm.RetryLevel)
	}
}

// A multiplier of 1 keeps the wait at min (LavinMQ's constant back-off).
func TestRetry_MultiplierOneIsConstant(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, declare("q", table("x-delayed-retry-type", str("all"), "x-delayed-retry-min", i64(50),
		"x-delayed-retry-multiplier", i64(1), "x-delivery-limit", i64(-1))), publish("", "q", "x", nil))
	var got []int64
	for i := 0; i < 3; i++ {
		now := m.Clock() + 1
		tag, _ := getTag(t, m, now, "q")
		fsmtest.One(t, m, now, reject(ch1, tag))
		due := queueInfo(t, m, "q").GetNextRetryDueMs()
		got = append(got, due-now)
		waitsFor(t, m, "q", due)
	}
	if fmt.Sprint(got) != "[50 50 50]" {
		t.Fatalf("delays %v, want [50 50 50]", got)
	}
}

// A retried message keeps its deadline when it is released: the queue's
// next death is the log's to decide again, though the queue held no
// message with a deadline while it waited.
func TestRetry_AReleasedMessageDiesOnTime(t *testing.T) {
	m := fsmtest.New(t)
	exp := "5000"
	fsmtest.Apply(t, m, 1000, declare("q", table("x-delayed-retry-type", str("all"), "x-delayed-retry-min", i64(300))),
		publish("", "q", "dies", &proto.Properties{Expiration: &exp}))
	tag, _ := getTag(t, m, 1001, "q")
	// A message without a deadline: the queue's only ready one.
	fsmtest.Apply(t, m, 1002, publish("", "q", "stays", nil))
	fsmtest.One(t, m, 1003, reject(ch1, tag))
	if d, ok := m.NextDeadline(); ok {
		t.Fatalf("next deadline %d while the message waits, want none", d)
	}
	fsmtest.One(t, m, 1303, release())
	if d, ok := m.NextDeadline(); !ok || d != 6000 {
		t.Fatalf("next deadline %d %v after the release, want 6000", d, ok)
	}
	if due := m.DueExpiries(6000); len(due) != 1 || due[0].GetName() != "q" {
		t.Fatalf("due at 6000: %v, want q", due)
	}
}
