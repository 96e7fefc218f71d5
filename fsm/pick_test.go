package fsm_test

import (
	"fmt"
	"math/rand"
	"strconv"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

var pickTypes = []string{fsm.ConsistentHashType, fsm.ModulusHashType, fsm.LocalRandomType}

// readyOf maps each queue of "/" to its ready count.
func readyOf(m *fsm.Machine) map[string]uint64 {
	out := map[string]uint64{}
	for _, q := range m.Queues("/") {
		out[q.GetName()] = q.GetReady()
	}
	return out
}

// routedTo publishes one message and returns the queues it entered.
func routedTo(t testing.TB, m *fsm.Machine, stamp int64, c *proto.Command) []string {
	t.Helper()
	before := readyOf(m)
	r, _ := fsmtest.One(t, m, stamp, c)
	mustOK(t, r)
	var out []string
	for q, n := range readyOf(m) {
		if n > before[q] {
			out = append(out, q)
		}
	}
	return out
}

// routedOne is routedTo for a message that must enter exactly one queue.
func routedOne(t testing.TB, m *fsm.Machine, stamp int64, c *proto.Command) string {
	t.Helper()
	qs := routedTo(t, m, stamp, c)
	if len(qs) != 1 {
		t.Fatalf("routed to %v, want exactly one queue", qs)
	}
	return qs[0]
}

func applyOK(t testing.TB, m *fsm.Machine, stamp int64, cmds ...*proto.Command) {
	t.Helper()
	res, _ := fsmtest.Apply(t, m, stamp, cmds...)
	for i, r := range res {
		if r.GetCode() != 0 {
			t.Fatalf("command %d refused: %d %s", i, r.GetCode(), r.GetText())
		}
	}
}

// Below level 11 the three types are refused as any unknown type, with
// today's code and text; from 11 they are declared and redeclared.
func TestPick_DeclareNeedsLevel11(t *testing.T) {
	for _, level := range []uint32{9, 10} {
		old := fsmtest.NewAt(t, level)
		for _, typ := range pickTypes {
			r, _ := fsmtest.One(t, old, 10, exchangeDeclare("x", typ, nil))
			if r.GetCode() != 503 || r.GetText() != "COMMAND_INVALID - unknown exchange type '"+typ+"'" {
				t.Fatalf("level %d, %s: %v", level, typ, r)
			}
		}
	}
	m := fsmtest.New(t)
	for _, typ := range pickTypes {
		applyOK(t, m, 10, exchangeDeclare(typ, typ, nil), exchangeDeclare(typ, typ, nil))
		r, _ := fsmtest.One(t, m, 10, exchangeDeclare(typ, "direct", nil))
		if r.GetCode() != 406 {
			t.Fatalf("%s redeclared as direct: %v", typ, r)
		}
	}
}

// The consistent-hash exchange's arguments and binding keys are refused
// with the plugin's texts.
func TestPick_ConsistentHashValidation(t *testing.T) {
	m := fsmtest.New(t)
	for _, c := range []struct {
		args *proto.Table
		text string
	}{
		{table("hash-header", str("h"), "hash-property", str("message_id")), "PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive"},
		{table("hash-property", str("app_id")), "PRECONDITION_FAILED - Unsupported property: app_id"},
		{table("hash-header", i64(1)), "PRECONDITION_FAILED - Invalid argument, 'hash-header' must be a string"},
	} {
		r, _ := fsmtest.One(t, m, 10, exchangeDeclare("bad", fsm.ConsistentHashType, c.args))
		if r.GetCode() != 406 || r.GetText() != c.text {
			t.Errorf("%v: %d %q, want 406 %q", c.args, r.GetCode(), r.GetText(), c.text)
		}
	}
	for _, p := range []string{"message_id", "correlation_id", "timestamp"} {
		applyOK(t, m, 10, exchangeDeclare("ch-"+p, fsm.ConsistentHashType, table("hash-property", str(p))))
	}
	applyOK(t, m, 10, exchangeDeclare("ch", fsm.ConsistentHashType, nil), declare("q", nil))
	for key, text := range map[string]string{
		"abc":                   `PRECONDITION_FAILED - The binding key must be an integer: <<"abc">>`,
		"":                      `PRECONDITION_FAILED - The binding key must be an integer: <<"">>`,
		" 5":                    `PRECONDITION_FAILED - The binding key must be an integer: <<" 5">>`,
		"0":                     "PRECONDITION_FAILED - The binding key must be greater than 0",
		"-3":                    "PRECONDITION_FAILED - The binding key must be greater than 0",
		"10001":                 "PRECONDITION_FAILED - The binding key must not exceed 10000",
		"99999999999999999999":  "PRECONDITION_FAILED - The binding key must not exceed 10000",
		"-99999999999999999999": "PRECONDITION_FAILED - The binding key must be greater than 0",
	} {
		r, _ := fsmtest.One(t, m, 10, bind("ch", "q", key, false, nil))
		if r.GetCode() != 406 || r.GetText() != text {
			t.Errorf("key %q: %d %q, want 406 %q", key, r.GetCode(), r.GetText(), text)
		}
	}
	if n := len(m.Bindings("/")); n != 0 {
		t.Fatalf("refused bindings were made: %v", m.Bindings("/"))
	}
	applyOK(t, m, 10, bind("ch", "q", "1", false, nil), bind("ch", "q", "+7", false, nil), bind("ch", "q", "10000", false, nil))
}

// The local-random exchange takes queues with an empty key only, and not
// quorum queues, as RabbitMQ's.
func TestPick_LocalRandomValidation(t *testing.T) {
	m := fsmtest.New(t)
	applyOK(t, m, 10, exchangeDeclare("lr", fsm.LocalRandomType, nil), exchangeDeclare("other", "fanout", nil),
		declare("q", nil), declare("qq", table("x-queue-type", str("quorum"))), declare("cq", table("x-queue-type", str("classic"))))
	for _, c := range []struct {
		cmd  *proto.Command
		text string
	}{
		{bind("lr", "q", "k", false, nil), "PRECONDITION_FAILED - Non empty binding 'k' key not permitted"},
		{bind("lr", "other", "", true, nil), "PRECONDITION_FAILED - Destination not found"},
		{bind("lr", "qq", "", false, nil), "PRECONDITION_FAILED - Queue type rabbit_quorum_queue not valid for this exchange type"},
	} {
		r, _ := fsmtest.One(t, m, 10, c.cmd)
		if r.GetCode() != 406 || r.GetText() != c.text {
			t.Errorf("%d %q, want 406 %q", r.GetCode(), r.GetText(), c.text)
		}
	}
	applyOK(t, m, 10, bind("lr", "q", "", false, nil), bind("lr", "cq", "", false, nil))
	// The modulus-hash exchange takes any binding, as RabbitMQ's.
	applyOK(t, m, 10, exchangeDeclare("mh", fsm.ModulusHashType, nil), bind("mh", "q", "anything", false, nil), bind("mh", "other", "", true, nil))
}

// chSetup: consistent-hash exchange "ch" with args, queues q1..qn bound
// with the weights given.
func chSetup(t testing.TB, args *proto.Table, weights ...int) *fsm.Machine {
	t.Helper()
	m := fsmtest.New(t)
	applyOK(t, m, 10, exchangeDeclare("ch", fsm.ConsistentHashType, args))
	for i, w := range weights {
		q := "q" + strconv.Itoa(i+1)
		applyOK(t, m, 10, declare(q, nil), bind("ch", q, strconv.Itoa(w), false, nil))
	}
	return m
}

// A routing key always reaches the same queue, and the queues share the
// keys as their weights say.
func TestPick_ConsistentHashFollowsWeights(t *testing.T) {
	m := chSetup(t, nil, 1, 3)
	first := map[string]string{}
	n := map[string]int{}
	const keys = 4000
	for i := 0; i < keys; i++ {
		k := "order-" + strconv.Itoa(i)
		q := routedOne(t, m, 20, publish("ch", k, "", nil))
		first[k] = q
		n[q]++
	}
	if share := float64(n["q2"]) / keys; share < 0.70 || share > 0.80 {
		t.Fatalf("weights 1:3, the second queue got %.3f of the keys (%v)", share, n)
	}
	for i := 0; i < keys; i += 37 {
		k := "order-" + strconv.Itoa(i)
		if q := routedOne(t, m, 30, publish("ch", k, "", nil)); q != first[k] {
			t.Fatalf("key %s went to %s, then to %s", k, first[k], q)
		}
	}
	// A new binding takes keys only for itself: a key that moves, moves to
	// the new queue.
	applyOK(t, m, 40, declare("q3", nil), bind("ch", "q3", "2", false, nil))
	moved := 0
	for i := 0; i < keys; i++ {
		k := "order-" + strconv.Itoa(i)
		q := routedOne(t, m, 50, publish("ch", k, "", nil))
		if q != first[k] {
			moved++
			if q != "q3" {
				t.Fatalf("key %s moved from %s to %s, not to the new queue", k, first[k], q)
			}
		}
	}
	if share := float64(moved) / keys; share < 0.27 || share > 0.40 {
		t.Fatalf("weight 2 of 6 took %.3f of the keys", share)
	}
}

// hashedOn publishes, for 40 values, two messages with the properties
// props(value) and different routing keys: both must reach the same
// queue, and the 40 values at least 3 of the 4 queues.
func hashedOn(t *testing.T, m *fsm.Machine, what string, props func(int) *proto.Properties) {
	t.Helper()
	seen := map[string]bool{}
	for c := 0; c < 40; c++ {
		q := routedOne(t, m, 20, publish("ch", "x", "", props(c)))
		seen[q] = true
		if got := routedOne(t, m, 20, publish("ch", "y", "", props(c))); got != q {
			t.Fatalf("%s %d: %s then %s", what, c, q, got)
		}
	}
	if len(seen) < 3 {
		t.Fatalf("40 values of %s reached only %v", what, seen)
	}
}

// With hash-header the header's value decides, whatever the routing key;
// messages without it all go one way. Likewise hash-property.
func TestPick_ConsistentHashOnHeaderAndProperty(t *testing.T) {
	m := chSetup(t, table("hash-header", str("customer")), 1, 1, 1, 1)
	hashedOn(t, m, "header", func(c int) *proto.Properties {
		return &proto.Properties{Headers: table("customer", str("c"+strconv.Itoa(c)))}
	})
	none := routedOne(t, m, 20, publish("ch", "a", "", nil))
	for k := 0; k < 20; k++ {
		if got := routedOne(t, m, 20, publish("ch", "b"+strconv.Itoa(k), "", nil)); got != none {
			t.Fatalf("messages without the header: %s and %s", none, got)
		}
	}
	hashedOn(t, m, "integer header", func(c int) *proto.Properties {
		return &proto.Properties{Headers: table("customer", i64(int64(c)))}
	})
	hashedOn(t, chSetup(t, table("hash-property", str("message_id")), 1, 1, 1, 1), "message id", func(c int) *proto.Properties {
		id := "m" + strconv.Itoa(c)
		return &proto.Properties{MessageId: &id}
	})
	hashedOn(t, chSetup(t, table("hash-property", str("timestamp")), 1, 1, 1, 1), "timestamp", func(c int) *proto.Properties {
		stamp := int64(1700000000 + c)
		return &proto.Properties{Timestamp: &stamp}
	})
}

// A destination's second binding adds no buckets, as in the plugin; once
// its first is gone the second counts.
func TestPick_ConsistentHashOneShareADestination(t *testing.T) {
	m := chSetup(t, nil, 1, 1)
	applyOK(t, m, 10, bind("ch", "q1", "50", false, nil))
	n := map[string]int{}
	for i := 0; i < 2000; i++ {
		n[routedOne(t, m, 20, publish("ch", strconv.Itoa(i), "", nil))]++
	}
	if n["q1"] > 1200 {
		t.Fatalf("a second binding of q1 added weight: %v", n)
	}
	applyOK(t, m, 30, &proto.Command{Cmd: &proto.Command_Unbind{Unbind: &proto.Unbind{Vhost: "/", Source: "ch", Destination: "q1", RoutingKey: "1", Connection: conn1}}})
	n = map[string]int{}
	for i := 0; i < 2000; i++ {
		n[routedOne(t, m, 40, publish("ch", strconv.Itoa(i), "", nil))]++
	}
	if n["q1"] < 1800 {
		t.Fatalf("weights 50:1, q1 got %v", n)
	}
}

// The modulus-hash exchange weighs a destination by its bindings, and
// routes alike whatever order they were made in.
func TestPick_ModulusHash(t *testing.T) {
	build := func(order []int) *fsm.Machine {
		m := fsmtest.New(t)
		applyOK(t, m, 10, exchangeDeclare("mh", fsm.ModulusHashType, nil), declare("q1", nil), declare("q2", nil), declare("q3", nil))
		binds := []*proto.Command{bind("mh", "q1", "", false, nil), bind("mh", "q2", "a", false, nil), bind("mh", "q2", "b", false, nil),
			bind("mh", "q3", "a", false, nil), bind("mh", "q3", "b", false, nil), bind("mh", "q3", "c", false, nil)}
		for _, i := range order {
			applyOK(t, m, 10, binds[i])
		}
		return m
	}
	a, b := build([]int{0, 1, 2, 3, 4, 5}), build([]int{5, 3, 1, 0, 4, 2})
	n := map[string]int{}
	for i := 0; i < 600; i++ {
		k := strconv.Itoa(i)
		qa := routedOne(t, a, 20, publish("mh", k, "", nil))
		if qb := routedOne(t, b, 20, publish("mh", k, "", nil)); qa != qb {
			t.Fatalf("key %s: %s with one binding order, %s with another", k, qa, qb)
		}
		n[qa]++
	}
	if !(n["q1"] < n["q2"] && n["q2"] < n["q3"]) {
		t.Fatalf("1, 2 and 3 bindings: %v", n)
	}
	// Every routing key counts, the CC ones too.
	var moved bool
	for i := 0; i < 50 && !moved; i++ {
		k := strconv.Itoa(i)
		plain := routedOne(t, a, 30, publish("mh", k, "", nil))
		cc := routedOne(t, a, 30, publish("mh", k, "", &proto.Properties{Headers: table("CC", str("other"))}))
		moved = plain != cc
	}
	if !moved {
		t.Fatal("a CC key never changed where a message went")
	}
}

// The local-random exchange puts each message in one bound queue, spread
// over all of them, and every replica picks the same.
func TestPick_LocalRandom(t *testing.T) {
	m := fsmtest.New(t)
	applyOK(t, m, 10, exchangeDeclare("lr", fsm.LocalRandomType, table("alternate-exchange", str("ae"))),
		exchangeDeclare("ae", "fanout", nil), declare("unrouted", nil), bind("ae", "unrouted", "", false, nil))
	if q := routedOne(t, m, 15, publish("lr", "k", "", nil)); q != "unrouted" {
		t.Fatalf("without bindings a message went to %s, not the alternate exchange", q)
	}
	for i := 1; i <= 4; i++ {
		q := "rpc" + strconv.Itoa(i)
		applyOK(t, m, 10, declare(q, nil), bind("lr", q, "", false, nil))
	}
	replica := roundTrip(t, m)
	n := map[string]int{}
	for i := 0; i < 400; i++ {
		c := publish("lr", "same-key", "", nil)
		q := routedOne(t, m, 20, c)
		if r := routedOne(t, replica, 20, c); r != q {
			t.Fatalf("message %d: %s on one replica, %s on another", i, q, r)
		}
		n[q]++
	}
	for i := 1; i <= 4; i++ {
		if c := n["rpc"+strconv.Itoa(i)]; c < 60 {
			t.Fatalf("one key over 4 queues: %v", n)
		}
	}
	// Several messages of one entry are drawn apart.
	cmds := make([]*proto.Command, 40)
	for i := range cmds {
		cmds[i] = publish("lr", "k", "", nil)
	}
	before := readyOf(m)
	applyOK(t, m, 30, cmds...)
	grew := 0
	for q, c := range readyOf(m) {
		if c > before[q] && q != "unrouted" {
			grew++
		}
	}
	if grew < 3 {
		t.Fatalf("40 messages of one entry reached %d queues", grew)
	}
}

// A dead-lettered message is routed by a picking exchange as a published
// one is.
func TestPick_DeadLetteredThroughConsistentHash(t *testing.T) {
	m := chSetup(t, nil, 1, 1, 1)
	// Through the dead-letter routing key: same key, same queue.
	applyOK(t, m, 30, declare("src2", table("x-dead-letter-exchange", str("ch"), "x-dead-letter-routing-key", str("k5"), "x-message-ttl", i64(0))))
	direct := routedOne(t, m, 40, publish("ch", "k5", "", nil))
	if dl := routedOne(t, m, 40, publish("", "src2", "", nil)); dl != direct {
		t.Fatalf("dead-lettered with key k5 went to %s, published with it to %s", dl, direct)
	}
}

// Level gate: a log that refused the declare below 11 refuses it on every
// replay; after the SetProtocol it is declared, and a replica replaying
// across the SetProtocol agrees with one restored from a snapshot.
func TestPick_ReplayAcrossSetProtocol(t *testing.T) {
	var log [][]*proto.Command
	add := func(c ...*proto.Command) { log = append(log, c) }
	add(exchangeDeclare("ch", fsm.ConsistentHashType, nil), declare("q1", nil), declare("q2", nil))
	add(bind("ch", "q1", "1", false, nil), publish("ch", "a", "", nil))
	add(fsmtest.SetProtocol(fsm.Protocol))
	add(exchangeDeclare("ch", fsm.ConsistentHashType, nil), bind("ch", "q1", "1", false, nil), bind("ch", "q2", "1", false, nil))
	for i := 0; i < 40; i++ {
		add(publish("ch", strconv.Itoa(i), "", nil))
	}
	replay := func(restoreAt int) (*fsm.Machine, [][]*proto.Result) { return replayLog(t, 9, log, restoreAt) }
	a, res := replay(-1)
	if r := res[0][0]; r.GetCode() != 503 {
		t.Fatalf("level 9 declare: %v", r)
	}
	if r := res[1][0]; r.GetCode() != 404 {
		t.Fatalf("level 9 bind to the refused exchange: %v", r)
	}
	for _, r := range res[3] {
		mustOK(t, r)
	}
	got := readyOf(a)
	if got["q1"] == 0 || got["q2"] == 0 || got["q1"]+got["q2"] != 40 {
		t.Fatalf("after the level: %v", got)
	}
	for at := range log {
		b, _ := replay(at)
		if a.Digest() != b.Digest() {
			t.Fatalf("restored after entry %d: digests differ", at)
		}
	}
}

// pickCommand builds one command of a random workload over picking
// exchanges: declares with random arguments, binds and unbinds with
// random weights, deletes, and publishes with random keys, headers and
// properties, several to an entry.
func pickCommand(r *rand.Rand) *proto.Command {
	xs := []string{"ch", "chh", "chp", "mh", "lr"}
	qs := []string{"q0", "q1", "q2", "q3", "q4"}
	x := xs[r.Intn(len(xs))]
	q := qs[r.Intn(len(qs))]
	key := ""
	switch x {
	case "ch", "chh", "chp":
		key = strconv.Itoa(1 + r.Intn(5))
	case "mh":
		key = strconv.Itoa(r.Intn(3))
	}
	switch k := r.Intn(100); {
	case k < 6:
		return declare(q, nil)
	case k < 8:
		return &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: q, Connection: conn1}}}
	case k < 22:
		if r.Intn(6) == 0 && x == "mh" {
			return bind(x, "ch", key, true, nil)
		}
		return bind(x, q, key, false, nil)
	case k < 30:
		return &proto.Command{Cmd: &proto.Command_Unbind{Unbind: &proto.Unbind{Vhost: "/", Source: x, Destination: q, RoutingKey: key, Connection: conn1}}}
	case k < 31:
		return &proto.Command{Cmd: &proto.Command_ExchangeDelete{ExchangeDelete: &proto.ExchangeDelete{Vhost: "/", Name: x}}}
	case k < 36:
		return pickDeclare(x)
	case k < 40:
		return get(q, true)
	default:
		id := strconv.Itoa(r.Intn(50))
		ts := int64(r.Intn(50))
		props := &proto.Properties{MessageId: &id, Timestamp: &ts, Headers: table("h", str(strconv.Itoa(r.Intn(50))))}
		if r.Intn(4) == 0 {
			props = nil
		}
		return publish(x, "k"+strconv.Itoa(r.Intn(200)), "", props)
	}
}

func pickDeclare(x string) *proto.Command {
	switch x {
	case "chh":
		return exchangeDeclare(x, fsm.ConsistentHashType, table("hash-header", str("h")))
	case "chp":
		return exchangeDeclare(x, fsm.ConsistentHashType, table("hash-property", str("message_id")))
	case "mh":
		return exchangeDeclare(x, fsm.ModulusHashType, nil)
	case "lr":
		return exchangeDeclare(x, fsm.LocalRandomType, nil)
	}
	return exchangeDeclare(x, fsm.ConsistentHashType, nil)
}

// Property: on random workloads a replica that applied the whole log, one
// restored from a snapshot at a random entry, and one that restores after
// every entry (so its rings are always rebuilt from the bindings) end
// every entry with the same digest: they route every message alike, so
// their rings are the same.
func TestPick_ReplicasRouteAlike(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 5
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewSource(seed))
			a := fsmtest.New(t)
			var setup []*proto.Command
			for _, x := range []string{"ch", "chh", "chp", "mh", "lr"} {
				setup = append(setup, pickDeclare(x))
			}
			applyOK(t, a, 10, setup...)
			b := roundTrip(t, a)
			var c *fsm.Machine
			cut := r.Intn(150)
			for e := 0; e < 300; e++ {
				cmds := make([]*proto.Command, 1+r.Intn(4))
				for i := range cmds {
					cmds[i] = pickCommand(r)
				}
				stamp := int64(20 + e)
				fsmtest.Apply(t, a, stamp, cmds...)
				fsmtest.Apply(t, b, stamp, cmds...)
				b = roundTrip(t, b)
				if e == cut {
					c = roundTrip(t, a)
				} else if c != nil {
					fsmtest.Apply(t, c, stamp, cmds...)
				}
				if a.Digest() != b.Digest() || (c != nil && a.Digest() != c.Digest()) {
					t.Fatalf("entry %d: digests differ", e)
				}
			}
			if a.Stats().Routed == 0 {
				t.Fatal("nothing was routed")
			}
		})
	}
}
