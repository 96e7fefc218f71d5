package fsm_test

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	pb "google.golang.org/protobuf/proto"
)

func delayedX(name, typ string) *proto.Command {
	return exchangeDeclare(name, fsm.DelayedExchangeType, table("x-delayed-type", str(typ)))
}

func withDelay(v *proto.Value) *proto.Properties {
	return &proto.Properties{Headers: table("x-delay", v)}
}

func mustOK(t testing.TB, r *proto.Result) {
	t.Helper()
	if r.GetCode() != 0 {
		t.Fatalf("refused: %d %s", r.GetCode(), r.GetText())
	}
}

// delayedSetup: delayed exchange "dx" routing as typ, queue "q" bound
// with key "k", all at stamp 1000.
func delayedSetup(t testing.TB, typ string) *fsm.Machine {
	t.Helper()
	m := fsmtest.New(t)
	res, _ := fsmtest.Apply(t, m, 1000, delayedX("dx", typ), declare("q", nil), bind("dx", "q", "k", false, nil))
	for _, r := range res {
		mustOK(t, r)
	}
	return m
}

func TestDelayed_DeclareNeedsLevel6AndAValidDelayedType(t *testing.T) {
	old := fsmtest.NewAt(t, 5)
	r, _ := fsmtest.One(t, old, 10, delayedX("dx", "direct"))
	if r.GetCode() != 503 || r.GetText() != "COMMAND_INVALID - unknown exchange type 'x-delayed-message'" {
		t.Fatalf("level 5: %v", r)
	}
	m := fsmtest.New(t)
	nx := len(m.Exchanges("/"))
	for _, c := range []struct {
		name string
		args *proto.Table
		code uint32
		text string
	}{
		{"missing", nil, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
		{"not a string", table("x-delayed-type", i64(1)), 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
		{"itself", table("x-delayed-type", str(fsm.DelayedExchangeType)), 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"},
		{"unknown", table("x-delayed-type", str("x-consistent-hash")), 503, "COMMAND_INVALID - unknown exchange type 'x-consistent-hash'"},
	} {
		r, _ := fsmtest.One(t, m, 10, exchangeDeclare("bad", fsm.DelayedExchangeType, c.args))
		if r.GetCode() != c.code || r.GetText() != c.text {
			t.Errorf("%s: %d %q, want %d %q", c.name, r.GetCode(), r.GetText(), c.code, c.text)
		}
	}
	if len(m.Exchanges("/")) != nx {
		t.Fatalf("a refused declare created an exchange: %v", m.Exchanges("/"))
	}
	for _, typ := range []string{"direct", "fanout", "topic", "headers"} {
		r, _ := fsmtest.One(t, m, 10, delayedX("dx-"+typ, typ))
		mustOK(t, r)
		r, _ = fsmtest.One(t, m, 10, delayedX("dx-"+typ, typ))
		mustOK(t, r)
	}
}

// TestDelayed_HeaderValues: what x-delay values delay, read as the plugin
// reads them.
func TestDelayed_HeaderValues(t *testing.T) {
	cases := []struct {
		name  string
		v     *proto.Value
		delay int64 // 0: routed at once
	}{
		{"int8", &proto.Value{Kind: &proto.Value_Int8{Int8: 100}}, 100},
		{"uint8", &proto.Value{Kind: &proto.Value_Uint8{Uint8: 200}}, 200},
		{"int16", &proto.Value{Kind: &proto.Value_Int16{Int16: 300}}, 300},
		{"uint16", &proto.Value{Kind: &proto.Value_Uint16{Uint16: 400}}, 400},
		{"int32", &proto.Value{Kind: &proto.Value_Int32{Int32: 500}}, 500},
		{"uint32 max", &proto.Value{Kind: &proto.Value_Uint32{Uint32: math.MaxUint32}}, math.MaxUint32},
		{"int64", i64(600), 600},
		{"float", &proto.Value{Kind: &proto.Value_Float64{Float64: 700.9}}, 700},
		{"float32", &proto.Value{Kind: &proto.Value_Float32{Float32: 800.5}}, 800},
		{"string", str("900"), 900},
		{"string with sign", str("+950"), 950},
		{"zero", i64(0), 0},
		{"negative", i64(-5000), 0},
		{"above 2^32-1", i64(math.MaxUint32 + 1), 0},
		{"string not a number", str("soon"), 0},
		{"float string", str("1.5"), 0},
		{"bool", &proto.Value{Kind: &proto.Value_Bool{Bool: true}}, 0},
		{"timestamp", &proto.Value{Kind: &proto.Value_Timestamp{Timestamp: 5}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := delayedSetup(t, "direct")
			r, _ := fsmtest.One(t, m, 2000, publish("dx", "k", "b", withDelay(c.v)))
			mustOK(t, r)
			if !r.GetRouted() {
				t.Fatal("not routed")
			}
			due, _, held := m.NextDelayed()
			if c.delay == 0 {
				if held || ready(t, m, "q") != 1 {
					t.Fatalf("held %v, ready %d: want routed at once", held, ready(t, m, "q"))
				}
				return
			}
			if !held || due != 2000+c.delay || ready(t, m, "q") != 0 {
				t.Fatalf("held %v due %d ready %d, want due %d", held, due, ready(t, m, "q"), 2000+c.delay)
			}
		})
	}
	m := delayedSetup(t, "direct")
	fsmtest.One(t, m, 2000, publish("dx", "k", "b", nil))
	if _, _, held := m.NextDelayed(); held || ready(t, m, "q") != 1 {
		t.Fatal("a publish without x-delay was not routed at once")
	}
}

// TestDelayed_ReleasedAtDueTimeWithNegatedHeader: nothing is released
// before its due time, a release routes with the bindings of that time,
// and the released copy carries x-delay set to minus the delay.
func TestDelayed_ReleasedAtDueTimeWithNegatedHeader(t *testing.T) {
	m := delayedSetup(t, "direct")
	fsmtest.One(t, m, 2000, publish("dx", "k", "late", withDelay(i64(5000))))
	fsmtest.One(t, m, 2000, declare("q2", nil))
	r, _ := fsmtest.One(t, m, 2000, consume("q2", "c", ch1, 10))
	mustOK(t, r)
	// Bindings change while it waits: q loses its binding, q2 gains one.
	fsmtest.One(t, m, 3000, &proto.Command{Cmd: &proto.Command_Unbind{Unbind: &proto.Unbind{Vhost: "/", Source: "dx", Destination: "q", RoutingKey: "k", Connection: conn1}}})
	fsmtest.One(t, m, 3000, bind("dx", "q2", "k", false, nil))

	_, rec := fsmtest.One(t, m, 6999, fsmtest.ReleaseDelayed(fsm.DelayedReleaseBatch))
	if len(rec.Deliveries) != 0 || m.Stats().Delayed != 1 {
		t.Fatal("released before its due time")
	}
	_, rec = fsmtest.One(t, m, 7000, fsmtest.ReleaseDelayed(fsm.DelayedReleaseBatch))
	if len(rec.Deliveries) != 1 || m.Stats().Delayed != 0 || ready(t, m, "q") != 0 {
		t.Fatalf("deliveries %d, delayed %d, q ready %d", len(rec.Deliveries), m.Stats().Delayed, ready(t, m, "q"))
	}
	d := rec.Deliveries[0]
	if string(d.Body) != "late" || d.Exchange != "dx" || d.RoutingKey != "k" {
		t.Fatalf("delivery %+v", d)
	}
	v, _ := headerOf(d.Properties, "x-delay")
	if v.GetInt32() != -5000 {
		t.Fatalf("x-delay of the released copy %v, want -5000", v)
	}
	// A second release, as a new leader might propose, releases nothing.
	_, rec = fsmtest.One(t, m, 8000, fsmtest.ReleaseDelayed(fsm.DelayedReleaseBatch))
	if len(rec.Deliveries) != 0 || ready(t, m, "q2") != 0 {
		t.Fatal("released twice")
	}
}

func headerOf(p *proto.Properties, key string) (*proto.Value, bool) {
	for _, f := range p.GetHeaders().GetFields() {
		if f.GetKey() == key {
			return f.GetValue(), true
		}
	}
	return nil, false
}

// TestDelayed_RoutesAsItsDelayedType: at once and after the delay, each
// x-delayed-type routes as the exchange type it names.
func TestDelayed_RoutesAsItsDelayedType(t *testing.T) {
	for _, c := range []struct {
		typ, bindKey string
		bindArgs     *proto.Table
		key          string
		headers      *proto.Table
		want         bool
	}{
		{"direct", "a", nil, "a", nil, true},
		{"direct", "a", nil, "b", nil, false},
		{"fanout", "a", nil, "zzz", nil, true},
		{"topic", "a.*", nil, "a.b", nil, true},
		{"topic", "a.*", nil, "b.a", nil, false},
		{"headers", "", table("x-match", str("all"), "h", str("1")), "", table("h", str("1")), true},
		{"headers", "", table("x-match", str("all"), "h", str("1")), "", table("h", str("2")), false},
	} {
		for _, delay := range []int64{0, 100} {
			t.Run(fmt.Sprintf("%s %s %d", c.typ, c.key, delay), func(t *testing.T) {
				m := fsmtest.New(t)
				fsmtest.Apply(t, m, 1000, delayedX("dx", c.typ), declare("q", nil), bind("dx", "q", c.bindKey, false, c.bindArgs))
				h := &proto.Table{}
				if c.headers != nil {
					h = c.headers
				}
				h.Fields = append(h.Fields, &proto.Field{Key: "x-delay", Value: i64(delay)})
				fsmtest.One(t, m, 1000, publish("dx", c.key, "b", &proto.Properties{Headers: h}))
				fsmtest.One(t, m, 1000+delay, fsmtest.ReleaseDelayed(fsm.DelayedReleaseBatch))
				if got := ready(t, m, "q") == 1; got != c.want {
					t.Fatalf("routed %v, want %v", got, c.want)
				}
			})
		}
	}
}

// TestDelayed_Mandatory: a mandatory delayed publish that would reach no
// queue now is returned and not kept; one that would is kept and
// confirmed; a publish that is not mandatory is kept either way.
func TestDelayed_Mandatory(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, delayedX("dx", "direct"), declare("q", nil), bind("dx", "q", "k", false, nil))
	mand := func(key string) *proto.Command {
		c := publish("dx", key, "b", withDelay(i64(100)))
		c.GetPublish().Mandatory = true
		return c
	}
	r, _ := fsmtest.One(t, m, 1000, mand("nowhere"))
	if r.GetRouted() || m.Stats().Delayed != 0 {
		t.Fatalf("unroutable mandatory: routed %v, delayed %d", r.GetRouted(), m.Stats().Delayed)
	}
	r, _ = fsmtest.One(t, m, 1000, mand("k"))
	if !r.GetRouted() || m.Stats().Delayed != 1 {
		t.Fatalf("routable mandatory: routed %v, delayed %d", r.GetRouted(), m.Stats().Delayed)
	}
	r, _ = fsmtest.One(t, m, 1000, publish("dx", "nowhere", "b", withDelay(i64(100))))
	if !r.GetRouted() || m.Stats().Delayed != 2 {
		t.Fatalf("not mandatory: routed %v, delayed %d", r.GetRouted(), m.Stats().Delayed)
	}
}

// TestDelayed_DueOrder: releases follow due time, then publish order.
func TestDelayed_DueOrder(t *testing.T) {
	m := delayedSetup(t, "fanout")
	delays := []int64{500, 100, 300, 100, 200, 500, 100}
	for i, d := range delays {
		fsmtest.One(t, m, 1000, publish("dx", "k", fmt.Sprint(i), withDelay(i64(d))))
	}
	fsmtest.One(t, m, 1000, consume("q", "c", ch1, 0))
	var got []string
	for now := int64(1000); now <= 1600; now += 50 {
		_, rec := fsmtest.One(t, m, now, fsmtest.ReleaseDelayed(2))
		for _, d := range rec.Deliveries {
			got = append(got, string(d.Body))
		}
	}
	if want := "1 3 6 4 2 0 5"; strings.Join(got, " ") != want {
		t.Fatalf("release order %q, want %q", strings.Join(got, " "), want)
	}
}

// TestDelayed_SameMillisecondBurstReleasesInBatches: 100,000 due in one
// millisecond leave over bounded commands, in publish order, each once.
func TestDelayed_SameMillisecondBurstReleasesInBatches(t *testing.T) {
	const n = 100000
	m := delayedSetup(t, "direct")
	cmds := make([]*proto.Command, 0, 1000)
	for i := 0; i < n; i++ {
		cmds = append(cmds, publish("dx", "k", fmt.Sprint(i), withDelay(i64(1000))))
		if len(cmds) == cap(cmds) {
			fsmtest.Apply(t, m, 1000, cmds...)
			cmds = cmds[:0]
		}
	}
	fsmtest.One(t, m, 1000, consume("q", "c", ch1, 0))
	batches, next := 0, 0
	for m.Stats().Delayed > 0 {
		_, rec := fsmtest.One(t, m, 2000, fsmtest.ReleaseDelayed(fsm.DelayedReleaseBatch))
		batches++
		if len(rec.Deliveries) != fsm.DelayedReleaseBatch {
			t.Fatalf("batch %d released %d", batches, len(rec.Deliveries))
		}
		for _, d := range rec.Deliveries {
			if string(d.Body) != fmt.Sprint(next) {
				t.Fatalf("released %s, want %d", d.Body, next)
			}
			next++
		}
	}
	if batches != n/fsm.DelayedReleaseBatch || next != n {
		t.Fatalf("%d batches, %d released", batches, next)
	}
}

// A snapshot tells how much of the bodies it names wait in delayed
// exchanges (released as they fall due, not in log order) apart from
// those queued: the node relocates the first rather than hold its log for
// them (cluster/group holdDenseLog).
func TestDelayed_SnapshotTellsTheDelayedBodiesApart(t *testing.T) {
	m := delayedSetup(t, "direct")
	want := int64(0)
	for i := 0; i < 20; i++ {
		body := fmt.Sprint("delayed-", i)
		want += int64(len(body))
		fsmtest.One(t, m, 1000, publish("dx", "k", body, withDelay(i64(5000))))
	}
	fsmtest.One(t, m, 1000, publish("dx", "k", "queued at once", nil))
	if m.Stats().Delayed != 20 {
		t.Fatalf("delayed %d, want 20", m.Stats().Delayed)
	}
	w, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	bl := w.(fsm.BodyLister)
	if n := len(fsm.Bodies(bl)); n != 21 {
		t.Fatalf("the snapshot names %d bodies, want 21", n)
	}
	var got int64
	bl.EachBody(func(b queue.Body, delayed bool) {
		if delayed {
			got += int64(b.Size)
		}
	})
	if got != want {
		t.Fatalf("delayed bodies: %d bytes, want %d", got, want)
	}
}

// TestDelayed_SnapshotRestoreAndDigest: delayed messages are state: a
// snapshot holds them (and names their bodies), a restored replica
// releases exactly what the original does, and the digest tells states
// apart by them.
func TestDelayed_SnapshotRestoreAndDigest(t *testing.T) {
	m := delayedSetup(t, "direct")
	before := m.Digest()
	for i := 0; i < 50; i++ {
		fsmtest.One(t, m, 1000+int64(i), publish("dx", "k", fmt.Sprint("m", i), withDelay(i64(int64(1000+(i*37)%200)))))
	}
	if m.Digest() == before {
		t.Fatal("the digest ignores delayed messages")
	}
	w, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	named := fsm.Bodies(w.(fsm.BodyLister))
	if len(named) != 50 {
		t.Fatalf("the snapshot names %d bodies, want the 50 delayed ones", len(named))
	}
	n := roundTrip(t, m)
	if n.Stats().Delayed != 50 || exchangeInfo(t, n, "dx").GetMessagesDelayed() != 50 {
		t.Fatalf("restored: delayed %d, exchange %v", n.Stats().Delayed, exchangeInfo(t, n, "dx"))
	}
	for _, x := range []*fsm.Machine{m, n} {
		fsmtest.One(t, x, 1000, consume("q", "c", ch1, 0))
	}
	for now := int64(2000); now <= 2300; now += 7 {
		_, r1 := fsmtest.One(t, m, now, fsmtest.ReleaseDelayed(3))
		_, r2 := fsmtest.One(t, n, now, fsmtest.ReleaseDelayed(3))
		if len(r1.Deliveries) != len(r2.Deliveries) {
			t.Fatalf("at %d: %d and %d released", now, len(r1.Deliveries), len(r2.Deliveries))
		}
		for i := range r1.Deliveries {
			if string(r1.Deliveries[i].Body) != string(r2.Deliveries[i].Body) {
				t.Fatalf("at %d: %s and %s", now, r1.Deliveries[i].Body, r2.Deliveries[i].Body)
			}
		}
		if m.Digest() != n.Digest() {
			t.Fatalf("at %d: digests differ", now)
		}
	}
	if m.Stats().Delayed != 0 {
		t.Fatalf("%d left", m.Stats().Delayed)
	}
}

// TestDelayed_ReplayEqualsRestore: a replica that replays the whole log
// and one restored from a snapshot taken half way agree at every entry.
func TestDelayed_ReplayEqualsRestore(t *testing.T) {
	var log [][]*proto.Command
	var stamps []int64
	add := func(st int64, c ...*proto.Command) { log = append(log, c); stamps = append(stamps, st) }
	add(1000, delayedX("dx", "topic"), declare("q", nil), bind("dx", "q", "#", false, nil), consume("q", "c", ch1, 5))
	for i := 0; i < 200; i++ {
		add(1000+int64(i), publish("dx", "a.b", fmt.Sprint(i), withDelay(i64(int64(i%13)*10))))
		if i%5 == 0 {
			add(1000+int64(i), fsmtest.ReleaseDelayed(4))
		}
		if i%9 == 0 {
			add(1000+int64(i), settle(ch1, 0, true))
		}
	}
	for i := 0; i < 40; i++ {
		add(1300+int64(i), fsmtest.ReleaseDelayed(7), settle(ch1, 0, true))
	}
	a := fsmtest.New(t)
	var b *fsm.Machine
	for i, cmds := range log {
		fsmtest.Apply(t, a, stamps[i], cmds...)
		if i == len(log)/2 {
			b = roundTrip(t, a)
		} else if b != nil {
			fsmtest.Apply(t, b, stamps[i], cmds...)
			if a.Digest() != b.Digest() {
				t.Fatalf("entry %d: digests differ", i)
			}
		}
	}
	if a.Stats().Delayed != 0 {
		t.Fatalf("%d never released", a.Stats().Delayed)
	}
}

// TestDelayed_DeletedExchangeOrVhostDropsItsMessages: nothing waits for
// an exchange that is gone; a new exchange of the name starts empty.
func TestDelayed_DeletedExchangeOrVhostDropsItsMessages(t *testing.T) {
	m := delayedSetup(t, "direct")
	fsmtest.One(t, m, 1000, delayedX("other", "direct"))
	fsmtest.One(t, m, 1000, publish("dx", "k", "a", withDelay(i64(100))))
	fsmtest.One(t, m, 1000, publish("other", "k", "b", withDelay(i64(50))))
	fsmtest.One(t, m, 1000, &proto.Command{Cmd: &proto.Command_ExchangeDelete{ExchangeDelete: &proto.ExchangeDelete{Vhost: "/", Name: "dx"}}})
	if m.Stats().Delayed != 1 {
		t.Fatalf("delayed %d after the delete, want 1", m.Stats().Delayed)
	}
	fsmtest.One(t, m, 1000, delayedX("dx", "direct"))
	fsmtest.One(t, m, 1000, bind("dx", "q", "k", false, nil))
	fsmtest.One(t, m, 5000, fsmtest.ReleaseDelayed(10))
	if ready(t, m, "q") != 0 {
		t.Fatal("a message of the deleted exchange was released")
	}
	roundTrip(t, m)

	fsmtest.One(t, m, 5000, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "v2"}}})
	fsmtest.One(t, m, 5000, &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "v2", Name: "dx", Type: fsm.DelayedExchangeType, Arguments: table("x-delayed-type", str("fanout"))}}})
	fsmtest.One(t, m, 5000, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "v2", Exchange: "dx", Properties: withDelay(i64(10))}}})
	if m.Stats().Delayed != 1 {
		t.Fatalf("delayed %d", m.Stats().Delayed)
	}
	fsmtest.One(t, m, 5000, &proto.Command{Cmd: &proto.Command_VhostDelete{VhostDelete: &proto.VhostDelete{Name: "v2"}}})
	if m.Stats().Delayed != 0 {
		t.Fatalf("delayed %d after the vhost delete", m.Stats().Delayed)
	}
	roundTrip(t, m)
}

// TestDelayed_TTLCountsFromRelease: a released copy enters its queue at
// the release, so its queue TTL counts from there.
func TestDelayed_TTLCountsFromRelease(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, delayedX("dx", "direct"), declare("q", table("x-message-ttl", i64(500))), bind("dx", "q", "k", false, nil))
	fsmtest.One(t, m, 1000, publish("dx", "k", "b", withDelay(i64(2000))))
	fsmtest.One(t, m, 3000, fsmtest.ReleaseDelayed(10))
	if d, ok := m.NextDeadline(); !ok || d != 3500 {
		t.Fatalf("deadline %d %v, want 3500", d, ok)
	}
}

// TestDelayed_DeadLetteredIntoADelayedExchange: a message dead-lettered
// to a delayed exchange with its x-delay waits there, as it would with
// the plugin (a retry with back-off).
func TestDelayed_DeadLetteredIntoADelayedExchange(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, delayedX("retry", "direct"), declare("work", table("x-dead-letter-exchange", str("retry"))),
		declare("again", nil), bind("retry", "again", "job", false, nil))
	fsmtest.One(t, m, 1000, publish("", "work", "payload", &proto.Properties{Expiration: ptr("10"), Headers: table("x-delay", i64(300))}))
	fsmtest.One(t, m, 1010, expire("work"))
	if m.Stats().Delayed != 1 || ready(t, m, "again") != 0 {
		t.Fatalf("delayed %d, again %d", m.Stats().Delayed, ready(t, m, "again"))
	}
	// Its routing key is the dead-letter one: the original "work".
	fsmtest.One(t, m, 1000, bind("retry", "again", "work", false, nil))
	fsmtest.One(t, m, 1310, fsmtest.ReleaseDelayed(10))
	r, _ := fsmtest.One(t, m, 1310, get("again", true))
	if string(r.GetGet().GetBody()) != "payload" {
		t.Fatalf("get %v", r)
	}
	if _, ok := headerOf(r.GetGet().GetProperties(), "x-death"); !ok {
		t.Fatal("the released dead-lettered copy lost x-death")
	}
	if v, _ := headerOf(r.GetGet().GetProperties(), "x-delay"); v.GetInt32() != -300 {
		t.Fatalf("x-delay %v", v)
	}
}

// TestDelayed_ThroughExchangeToExchangeBinding: a delayed exchange met
// past another exchange holds the message as the plugin's does, and what
// routes elsewhere goes at once.
func TestDelayed_ThroughExchangeToExchangeBinding(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, delayedX("dx", "fanout"), declare("late", nil), declare("now", nil),
		exchangeDeclare("front", "fanout", nil), bind("front", "dx", "", true, nil), bind("front", "now", "", false, nil),
		bind("dx", "late", "", false, nil))
	fsmtest.One(t, m, 1000, publish("front", "", "b", withDelay(i64(100))))
	if ready(t, m, "now") != 1 || ready(t, m, "late") != 0 || m.Stats().Delayed != 1 {
		t.Fatal("not split between now and later")
	}
	fsmtest.One(t, m, 1100, fsmtest.ReleaseDelayed(10))
	if ready(t, m, "late") != 1 || ready(t, m, "now") != 1 {
		t.Fatalf("late %d now %d", ready(t, m, "late"), ready(t, m, "now"))
	}
}

// TestDelayed_List: the operators' view, earliest first, filtered.
func TestDelayed_List(t *testing.T) {
	m := delayedSetup(t, "direct")
	fsmtest.One(t, m, 1000, delayedX("dy", "direct"))
	for i, d := range []int64{30, 10, 20, 40} {
		x := "dx"
		if i%2 == 1 {
			x = "dy"
		}
		fsmtest.One(t, m, 1000, publish(x, "k", fmt.Sprint(i), withDelay(i64(d))))
	}
	var dues []int64
	for _, d := range m.Delayed("", "", 10) {
		dues = append(dues, d.DueMs)
	}
	if fmt.Sprint(dues) != "[1010 1020 1030 1040]" {
		t.Fatalf("dues %v", dues)
	}
	if l := m.Delayed("/", "dy", 1); len(l) != 1 || l[0].DueMs != 1010 || l[0].Exchange != "dy" {
		t.Fatalf("filtered %+v", l)
	}
	if x := exchangeInfo(t, m, "dx"); x.GetMessagesDelayed() != 2 || x.GetNextDelayedDueMs() != 1020 {
		t.Fatalf("dx %v", x)
	}
}

func exchangeInfo(t testing.TB, m *fsm.Machine, name string) *proto.ExchangeInfo {
	t.Helper()
	for _, x := range m.Exchanges("/") {
		if x.GetName() == name {
			return x
		}
	}
	t.Fatalf("no exchange %q", name)
	return nil
}

// TestDelayed_ReleasedHeaderType: minus the delay as a signed 32-bit
// integer where it fits (the plugin's type, which every client reads),
// a long beyond.
func TestDelayed_ReleasedHeaderType(t *testing.T) {
	m := delayedSetup(t, "direct")
	fsmtest.One(t, m, 1000, publish("dx", "k", "short", withDelay(i64(math.MaxInt32))))
	fsmtest.One(t, m, 1000, publish("dx", "k", "long", withDelay(i64(math.MaxInt32+1))))
	fsmtest.One(t, m, 1000, consume("q", "c", ch1, 0))
	_, rec := fsmtest.One(t, m, 1000+math.MaxInt32+1, fsmtest.ReleaseDelayed(10))
	if len(rec.Deliveries) != 2 {
		t.Fatalf("%d released", len(rec.Deliveries))
	}
	if v, _ := headerOf(rec.Deliveries[0].Properties, "x-delay"); v.GetKind().(*proto.Value_Int32).Int32 != -math.MaxInt32 {
		t.Fatalf("short: %v", v)
	}
	if v, _ := headerOf(rec.Deliveries[1].Properties, "x-delay"); v.GetKind().(*proto.Value_Int64).Int64 != -math.MaxInt32-1 {
		t.Fatalf("long: %v", v)
	}
}

// TestDelayed_Cancel: a listed message can be dropped before its release,
// once; the others are released as before.
func TestDelayed_Cancel(t *testing.T) {
	m := delayedSetup(t, "direct")
	for i := 0; i < 5; i++ {
		fsmtest.One(t, m, 1000, publish("dx", "k", fmt.Sprint(i), withDelay(i64(int64(100*(i+1))))))
	}
	l := m.Delayed("/", "dx", 10)
	victim := l[2]
	if victim.GetRoutingKey() != "k" || victim.GetDueMs() != 1300 {
		t.Fatalf("listed %v", victim)
	}
	r, _ := fsmtest.One(t, m, 1000, fsmtest.CancelDelayed("/", "other", victim.GetSeq()))
	if r.GetCode() != 404 {
		t.Fatalf("cancel in the wrong exchange: %v", r)
	}
	r, _ = fsmtest.One(t, m, 1000, fsmtest.CancelDelayed("/", "dx", victim.GetSeq()))
	mustOK(t, r)
	if r, _ = fsmtest.One(t, m, 1000, fsmtest.CancelDelayed("/", "dx", victim.GetSeq())); r.GetCode() != 404 ||
		r.GetText() != fmt.Sprintf("NOT_FOUND - no delayed message %d in exchange 'dx' in vhost '/'", victim.GetSeq()) {
		t.Fatalf("second cancel: %v", r)
	}
	if x := exchangeInfo(t, m, "dx"); x.GetMessagesDelayed() != 4 {
		t.Fatalf("dx %v", x)
	}
	roundTrip(t, m)
	fsmtest.One(t, m, 1000, consume("q", "c", ch1, 0))
	_, rec := fsmtest.One(t, m, 2000, fsmtest.ReleaseDelayed(10))
	var got []string
	for _, d := range rec.Deliveries {
		got = append(got, string(d.Body))
	}
	if strings.Join(got, " ") != "0 1 3 4" {
		t.Fatalf("released %v", got)
	}
}

// TestDelayed_Purge: a purge drops every message one delayed exchange
// holds, none of another's, and counts them; a missing exchange is 404 and
// one of another type 406.
func TestDelayed_Purge(t *testing.T) {
	m := delayedSetup(t, "direct")
	fsmtest.One(t, m, 1000, delayedX("other", "direct"))
	fsmtest.One(t, m, 1000, bind("other", "q", "k", false, nil))
	for i := 0; i < 5; i++ {
		fsmtest.One(t, m, 1000, publish("dx", "k", fmt.Sprint(i), withDelay(i64(int64(100*(i+1))))))
	}
	fsmtest.One(t, m, 1000, publish("other", "k", "kept", withDelay(i64(50))))
	r, _ := fsmtest.One(t, m, 1000, fsmtest.PurgeDelayed("/", "dx"))
	mustOK(t, r)
	if r.GetMessageCount() != 5 {
		t.Fatalf("purged %d", r.GetMessageCount())
	}
	if x := exchangeInfo(t, m, "dx"); x.GetMessagesDelayed() != 0 || x.GetNextDelayedDueMs() != 0 {
		t.Fatalf("dx %v", x)
	}
	if l := m.Delayed("/", "", 10); len(l) != 1 || l[0].GetExchange() != "other" {
		t.Fatalf("left %v", l)
	}
	if r, _ := fsmtest.One(t, m, 1000, fsmtest.PurgeDelayed("/", "dx")); r.GetCode() != 0 || r.GetMessageCount() != 0 {
		t.Fatalf("second purge %v", r)
	}
	if r, _ := fsmtest.One(t, m, 1000, fsmtest.PurgeDelayed("/", "nope")); r.GetCode() != 404 ||
		r.GetText() != "NOT_FOUND - no exchange 'nope' in vhost '/'" {
		t.Fatalf("missing exchange %v", r)
	}
	if r, _ := fsmtest.One(t, m, 1000, fsmtest.PurgeDelayed("/", "amq.direct")); r.GetCode() != 406 ||
		r.GetText() != "PRECONDITION_FAILED - exchange 'amq.direct' in vhost '/' is not an x-delayed-message exchange" {
		t.Fatalf("direct exchange %v", r)
	}
	m = roundTrip(t, m)
	fsmtest.One(t, m, 1000, consume("q", "c", ch1, 0))
	_, rec := fsmtest.One(t, m, 5000, fsmtest.ReleaseDelayed(10))
	if len(rec.Deliveries) != 1 || string(rec.Deliveries[0].Body) != "kept" {
		t.Fatalf("released %v", rec.Deliveries)
	}
}

// TestDelayed_ReleaseStats: each release is counted with its lateness in
// log time, and the counts survive a KeepReleases.
func TestDelayed_ReleaseStats(t *testing.T) {
	m := delayedSetup(t, "direct")
	for _, d := range []int64{100, 200, 300} {
		fsmtest.One(t, m, 1000, publish("dx", "k", "b", withDelay(i64(d))))
	}
	fsmtest.One(t, m, 1100, fsmtest.ReleaseDelayed(10)) // on time
	fsmtest.One(t, m, 1300, fsmtest.ReleaseDelayed(10)) // 100 and 0 late
	st := m.Releases()
	if st.Released != 3 || st.LateSumMs != 100 {
		t.Fatalf("stats %+v", st)
	}
	var want [len(fsm.ReleaseLatenessBucketsMs) + 1]uint64
	want[0] = 2 // 0 ms
	for i, b := range fsm.ReleaseLatenessBucketsMs {
		if b == 100 {
			want[i] = 1
		}
	}
	if st.Late != want {
		t.Fatalf("late %v, want %v", st.Late, want)
	}
	n := fsm.New()
	n.KeepReleases(m)
	if n.Releases() != st {
		t.Fatalf("kept %+v", n.Releases())
	}
}

// TestDelayed_ValidateRelease: the batch bound is enforced where the
// command enters the log.
func TestDelayed_ValidateRelease(t *testing.T) {
	if err := fsm.Validate(fsmtest.ReleaseDelayed(fsm.MaxReleaseBatch), fsm.Limits{}); err != nil {
		t.Fatal(err)
	}
	e, ok := fsm.Validate(fsmtest.ReleaseDelayed(fsm.MaxReleaseBatch+1), fsm.Limits{}).(*fsm.InvalidError)
	if !ok || e.Code != 406 {
		t.Fatalf("limit above the bound: %v", e)
	}
	if e, ok := fsm.Validate(fsmtest.CancelDelayed("/", "dx", 0), fsm.Limits{}).(*fsm.InvalidError); !ok || e.Code != 541 {
		t.Fatalf("cancel of 0: %v", e)
	}
}

// TestDelayed_SnapshotFormatFollowsTheLevel: below level 6 a snapshot is
// written in format 7, which the release before reads; from 6 on in 8,
// from 9 on in 9 (apply_retry.go), from 12 on in 10 (vhost_limits.go),
// from 13 on in 11 (groups.go), from 15 on in 12 (queue_groups.go),
// from 16 on in 13 (GroupMembers), from 17 on in 14 (placement.go),
// from 23 on in 15 (lease.go).
func TestDelayed_SnapshotFormatFollowsTheLevel(t *testing.T) {
	for _, c := range []struct {
		level  uint32
		format byte
	}{{5, 7}, {6, 8}, {11, 9}, {12, 10}, {13, 11}, {14, 11}, {15, 12}, {16, 13}, {22, 14}, {fsm.Protocol, 15}} {
		m := fsmtest.NewAt(t, c.level)
		w, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		if got := buf.Bytes()[4]; got != c.format {
			t.Errorf("level %d: format %d, want %d", c.level, got, c.format)
		}
		roundTrip(t, m)
	}
}

// TestDelayed_KeptWithoutTheirDelayFromLevel9: from level 9 messages
// alike but for their x-delay share one table entry while they wait,
// published or dead-lettered; what a consumer and the listing see is what
// level 8 gave, but for the listing's integer type.
func TestDelayed_KeptWithoutTheirDelayFromLevel9(t *testing.T) {
	type seen struct {
		entries int
		listed  []*proto.Properties
		got     []*proto.Properties
	}
	run := func(level uint32) seen {
		m := fsmtest.NewAt(t, level)
		res, _ := fsmtest.Apply(t, m, 1000, delayedX("dx", "direct"), declare("q", nil), bind("dx", "q", "k", false, nil),
			declare("work", table("x-dead-letter-exchange", str("dx"), "x-dead-letter-routing-key", str("k"))))
		for _, r := range res {
			mustOK(t, r)
		}
		before := m.TableEntries()
		for i, d := range []*proto.Value{i64(100), i64(200), str("300")} {
			// x-delay between two headers: its place is kept.
			props := &proto.Properties{Headers: table("a", str("1"), "x-delay", d, "z", str("2"))}
			r, _ := fsmtest.One(t, m, 1000, publish("dx", "k", fmt.Sprint("p", i), props))
			mustOK(t, r)
		}
		for _, d := range []int64{400, 500} {
			dl := &proto.Properties{Expiration: ptr("10"), Headers: table("a", str("1"), "x-delay", i64(d), "z", str("2"))}
			r, _ := fsmtest.One(t, m, 1000, publish("", "work", "dl", dl))
			mustOK(t, r)
		}
		fsmtest.One(t, m, 1010, expire("work"))
		var s seen
		s.entries = m.TableEntries() - before
		for _, d := range m.Delayed("/", "dx", 10) {
			s.listed = append(s.listed, d.GetProperties())
		}
		fsmtest.One(t, m, 1600, fsmtest.ReleaseDelayed(10))
		for range 5 {
			r, _ := fsmtest.One(t, m, 1600, get("q", true))
			s.got = append(s.got, r.GetGet().GetProperties())
		}
		return s
	}
	old, now := run(8), run(fsm.Protocol)
	// Three published, two dead-lettered (with x-death): two entries.
	if old.entries != 5 || now.entries != 2 {
		t.Fatalf("table entries while waiting: %d at level 8, %d at level %d; want 5 and 2", old.entries, now.entries, fsm.Protocol)
	}
	for i := range 5 {
		if !pb.Equal(old.got[i], now.got[i]) {
			t.Errorf("delivery %d: %v at level 8, %v now", i, old.got[i], now.got[i])
		}
		if v, _ := headerOf(now.got[i], "x-delay"); v.GetInt32() != -int32(100*(i+1)) || now.got[i].GetHeaders().GetFields()[1].GetKey() != "x-delay" {
			t.Errorf("delivery %d: headers %v, want x-delay %d second", i, now.got[i].GetHeaders(), -100*(i+1))
		}
	}
	if len(now.listed) != 5 {
		t.Fatalf("listed %d", len(now.listed))
	}
	for i := range 5 {
		was, _ := fsm.DelayOf(old.listed[i].GetHeaders())
		is, _ := fsm.DelayOf(now.listed[i].GetHeaders())
		if was != int64(100*(i+1)) || is != was {
			t.Errorf("listed %d: x-delay %d at level 8, %d now", i, was, is)
		}
	}
}
