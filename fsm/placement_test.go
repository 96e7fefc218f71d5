package fsm_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// placing is a metadata machine at fsm.Protocol with the queue groups
// named and placement on.
func placing(t *testing.T, groups ...string) *fsm.Machine {
	t.Helper()
	return placingAt(t, fsm.Protocol, groups...)
}

// placingAt is placing in a log at level.
func placingAt(t *testing.T, level uint32, groups ...string) *fsm.Machine {
	t.Helper()
	m := fsmtest.NewAt(t, level)
	var specs []*proto.QueueGroup
	for _, g := range groups {
		specs = append(specs, groupSpec(g, "a", "b", "c"))
	}
	applyOK(t, m, 2, queueGroupsCmd(specs...), fsmtest.PlaceQueues())
	return m
}

func placementOf(t *testing.T, m *fsm.Machine, q string) string {
	t.Helper()
	g, ok := m.QueuePlacement("/", q)
	if !ok {
		t.Fatalf("queue %q missing", q)
	}
	return g
}

func exclusiveDeclare(name string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: name, Exclusive: true, Connection: conn1}}}
}

// Each new queue goes to the group with the fewest queues placed, ties
// to the earliest group of the log: two replicas place alike, a deleted
// queue frees its group's place, and the group's leader reads the
// declares to propose in its log.
func TestPlacement_SpreadsEvenly(t *testing.T) {
	a, b := placing(t, "q1", "q2", "q3"), placing(t, "q1", "q2", "q3")
	if !a.Placing() {
		t.Fatal("Placing after PlaceQueues")
	}
	for _, m := range []*fsm.Machine{a, b} {
		for _, q := range []string{"a", "b", "c", "d", "e", "f", "g"} {
			applyOK(t, m, 3, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: q, Durable: true,
				Arguments: table("x-max-length", i64(5))}}})
		}
	}
	want := map[string]string{"a": "q1", "b": "q2", "c": "q3", "d": "q1", "e": "q2", "f": "q3", "g": "q1"}
	for q, g := range want {
		if got := placementOf(t, a, q); got != g {
			t.Errorf("%s placed in %q, want %q", q, got, g)
		}
	}
	if a.Digest() != b.Digest() {
		t.Fatal("two replicas placed differently")
	}
	none := func(string, string) bool { return false }
	ds, vhosts := a.PlacedMissing("q1", none)
	if got := idsOf(ds, func(d *proto.QueueDeclare) string { return d.GetName() }); !slices.Equal(got, []string{"a", "d", "g"}) || !slices.Equal(vhosts, []string{"/"}) {
		t.Fatalf("PlacedMissing(q1) %v in %v", got, vhosts)
	}
	if ds, _ := a.PlacedMissing("q1", func(_, name string) bool { return name != "d" }); len(ds) != 1 || ds[0].GetName() != "d" {
		t.Fatalf("PlacedMissing(q1) of a group holding all but d: %v", ds)
	}
	if d := ds[0]; d.GetVhost() != "/" || !d.GetDurable() || len(d.GetArguments().GetFields()) != 1 || d.GetPassive() {
		t.Fatalf("declare %v", d)
	}
	if ds, vs := a.PlacedMissing("q9", none); ds != nil || vs != nil {
		t.Fatal("PlacedMissing of a group with no queue")
	}
	if ds, vs := a.PlacedMissing("", none); ds != nil || vs != nil {
		t.Fatal("PlacedMissing of the metadata group")
	}
	// q2 and q3 hold 2 each, q1 3: deleting one of q2's makes it the
	// fewest, then it ties with q3, and the earlier wins.
	applyOK(t, a, 4, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "e"}}})
	applyOK(t, a, 4, declare("h", nil), declare("i", nil))
	if placementOf(t, a, "h") != "q2" || placementOf(t, a, "i") != "q2" {
		t.Fatalf("h in %q, i in %q", placementOf(t, a, "h"), placementOf(t, a, "i"))
	}
	if _, ok := a.QueuePlacement("/", "e"); ok {
		t.Fatal("a deleted queue has a placement")
	}
	// The counts survive a restore: the next queue is placed alike.
	r := roundTrip(t, a)
	for _, m := range []*fsm.Machine{a, r} {
		applyOK(t, m, 5, declare("j", nil))
	}
	if placementOf(t, r, "j") != placementOf(t, a, "j") || r.Digest() != a.Digest() || !r.Placing() {
		t.Fatal("a restored replica places otherwise")
	}
}

// Exclusive and auto-delete queues stay in the metadata group, as does
// every queue while placement is off or no queue group exists; a
// redeclare keeps its queue where it is and checks equivalence as ever.
func TestPlacement_WhatStays(t *testing.T) {
	m := placing(t, "q1", "q2")
	applyOK(t, m, 3, exclusiveDeclare("ex"),
		&proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "ad", AutoDelete: true}}},
		declare("p", table("x-message-ttl", i64(1000))))
	for q, g := range map[string]string{"ex": "", "ad": "", "p": "q1"} {
		if got := placementOf(t, m, q); got != g {
			t.Errorf("%s placed in %q, want %q", q, got, g)
		}
	}
	// The queues that stayed count for no group: the next goes to q2.
	applyOK(t, m, 3, declare("p2", nil))
	if placementOf(t, m, "p2") != "q2" {
		t.Fatalf("p2 in %q", placementOf(t, m, "p2"))
	}
	r, _ := fsmtest.One(t, m, 4, declare("p", table("x-message-ttl", i64(1000))))
	if r.GetCode() != 0 || r.GetQueue() != "p" || placementOf(t, m, "p") != "q1" {
		t.Fatalf("redeclare %v, in %q", r, placementOf(t, m, "p"))
	}
	if r, _ := fsmtest.One(t, m, 4, declare("p", table("x-message-ttl", i64(5)))); r.GetCode() != 406 || placementOf(t, m, "p") != "q1" {
		t.Fatalf("inequivalent redeclare: %v", r)
	}
	if r, _ := fsmtest.One(t, m, 4, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "p", Passive: true}}}); r.GetCode() != 0 || r.GetMessageCount() != 0 {
		t.Fatalf("passive redeclare: %v", r)
	}

	off := fsmtest.New(t)
	applyOK(t, off, 2, queueGroupsCmd(groupSpec("q1", "a")), declare("x", nil))
	noGroups := fsmtest.New(t)
	applyOK(t, noGroups, 2, fsmtest.PlaceQueues(), declare("x", nil))
	for _, m := range []*fsm.Machine{off, noGroups} {
		if placementOf(t, m, "x") != "" {
			t.Fatal("a queue placed with placement off or without queue groups")
		}
	}
	if off.Placing() || !noGroups.Placing() {
		t.Fatal("Placing")
	}
	if _, ok := off.QueuePlacement("/", "nope"); ok {
		t.Fatal("QueuePlacement of no queue")
	}
}

// PlaceQueues needs level 17 (below, it is refused and nothing changes,
// so the state still writes the format of before) and the metadata log.
func TestPlaceQueues_RefusedBelowLevelAndInQueueGroups(t *testing.T) {
	if got := fsm.CommandProtocol(fsmtest.PlaceQueues()); got != fsm.PlacementLevel || fsm.PlacementLevel != 17 {
		t.Fatalf("level %d", got)
	}
	if err := fsm.Validate(fsmtest.PlaceQueues(), fsm.Limits{}); err != nil {
		t.Fatal(err)
	}
	old := fsmtest.NewAt(t, 16)
	applyOK(t, old, 2, queueGroupsCmd(groupSpec("q1", "a")))
	if r, _ := fsmtest.One(t, old, 3, fsmtest.PlaceQueues()); r.GetCode() != 540 || old.Placing() {
		t.Fatalf("below level 17: %v", r)
	}
	applyOK(t, old, 3, declare("x", nil))
	if placementOf(t, old, "x") != "" {
		t.Fatal("placed below level 17")
	}
	if b, _ := snapshotBytes(t, old); b[4] != 13 {
		t.Fatalf("a level 16 state wrote format %d, want 13", b[4])
	}
	g := queueGroup(t, 2)
	if r, _ := fsmtest.One(t, g, 3, fsmtest.PlaceQueues()); r.GetCode() != 406 || g.Placing() {
		t.Fatalf("in a queue group: %v", r)
	}
}

// Placement is in the snapshot and the digest, and so are the queues'
// groups and the outbox's target queues.
func TestPlacement_SnapshotAndDigest(t *testing.T) {
	on, off := placing(t, "q1"), fsmtest.New(t)
	applyOK(t, off, 2, queueGroupsCmd(groupSpec("q1", "a", "b", "c")))
	if on.Digest() == off.Digest() {
		t.Fatal("the digest does not hold placement")
	}
	a, b := placing(t, "q1"), placing(t, "q1")
	applyOK(t, a, 3, declare("x", nil))
	applyOK(t, b, 3, exclusiveDeclare("x"))
	if a.Digest() == b.Digest() {
		t.Fatal("the digest does not hold the queue's group")
	}
	applyOK(t, a, 4, publish("", "x", "body", nil))
	n := roundTrip(t, a)
	if placementOf(t, n, "x") != "q1" || !n.Placing() {
		t.Fatal("restored without its placement")
	}
	if out := n.Outbox(0, 0); len(out) != 1 || !slices.Equal(out[0].Queues, []string{"x"}) {
		t.Fatalf("restored outbox %+v", out)
	}
	if b, _ := snapshotBytes(t, a); b[4] != 15 {
		t.Fatalf("format %d, want 15", b[4])
	}
}

// A publish to a placed queue leaves through the outbox, pre-routed: one
// entry for every placed queue it reaches, the metadata group's queues
// enqueued as ever, routed for the confirm and for mandatory. The body
// stays named until HandOffDone.
func TestPlacement_PublishGoesToTheOutbox(t *testing.T) {
	m := placing(t, "q1", "q2")
	applyOK(t, m, 3, declare("p1", nil), declare("p2", nil), exclusiveDeclare("local"),
		exchangeDeclare("fx", "fanout", nil), bind("fx", "p1", "", false, nil), bind("fx", "local", "", false, nil), bind("fx", "p2", "", false, nil))
	if placementOf(t, m, "p1") != "q1" || placementOf(t, m, "p2") != "q2" {
		t.Fatal("placement")
	}
	r, _ := fsmtest.One(t, m, 4, publish("fx", "k", "mixed", &proto.Properties{MessageId: ptr("m1")}))
	if r.GetCode() != 0 || !r.GetRouted() || r.GetRejected() {
		t.Fatalf("publish %v", r)
	}
	if ready(t, m, "local") != 1 || ready(t, m, "p1") != 0 || ready(t, m, "p2") != 0 {
		t.Fatal("the metadata group holds a placed queue's message, or not its own")
	}
	out := m.Outbox(0, 0)
	if len(out) != 1 {
		t.Fatalf("outbox %+v, want one entry", out)
	}
	e := out[0]
	if !slices.Equal(e.Queues, []string{"p1", "p2"}) || e.Exchange != "fx" || !slices.Equal(e.RoutingKeys, []string{"k"}) || e.DeadLettered ||
		e.Vhost != "/" || e.Properties.GetMessageId() != "m1" || e.Index != m.AppliedIndex() || e.Key != 1 {
		t.Fatalf("entry %+v", e)
	}
	if string(fsmtest.Body(e.Body)) != "mixed" {
		t.Fatalf("body %q", fsmtest.Body(e.Body))
	}
	_, bodies := snapshotBytes(t, m)
	if !slices.Contains(bodies, e.Body) {
		t.Fatalf("snapshot bodies %v miss the outbox's %v", bodies, e.Body)
	}

	// Mandatory, to a placed queue only: routed, not returned.
	mand := publish("", "p2", "only", nil)
	mand.GetPublish().Mandatory = true
	if r, _ := fsmtest.One(t, m, 5, mand); !r.GetRouted() {
		t.Fatalf("mandatory publish to a placed queue: %v", r)
	}
	only := m.Outbox(1, 0)[0]
	if _, bodies = snapshotBytes(t, m); !slices.Equal(only.Queues, []string{"p2"}) || !slices.Contains(bodies, only.Body) {
		t.Fatalf("entry %+v, bodies %v", only, bodies)
	}
	// To nothing: not routed, no entry.
	if r, _ := fsmtest.One(t, m, 5, publish("", "none", "x", nil)); r.GetRouted() || m.OutboxLen() != 2 {
		t.Fatalf("publish to no queue: %v, outbox %d", r, m.OutboxLen())
	}

	// HandOffDone forgets the entries, and the snapshot their bodies.
	applyOK(t, m, 6, fsmtest.HandOffDone(2))
	_, bodies = snapshotBytes(t, m)
	if m.OutboxLen() != 0 || slices.Contains(bodies, only.Body) {
		t.Fatalf("after HandOffDone: outbox %d, bodies %v", m.OutboxLen(), bodies)
	}
	if qi, _ := m.Queue("/", "p1"); qi.GetReady() != 0 || qi.GetRaftGroup() != "q1" {
		t.Fatalf("queue info %v", qi)
	}
	if qi, _ := m.Queue("/", "local"); qi.GetRaftGroup() != "" {
		t.Fatalf("queue info %v", qi)
	}
}

// Every way a publish routes reaches placed queues alike: exchange to
// exchange, alternate exchange, CC and BCC. The BCC keys travel in the
// entry's properties, and a queue group enqueues the hand-off without
// them, as a publish's.
func TestPlacement_EveryRouteReachesTheOutbox(t *testing.T) {
	m := placing(t, "q1", "q2")
	applyOK(t, m, 3, declare("pe", nil), declare("pa", nil), declare("pc", nil), declare("pb", nil),
		exchangeDeclare("top", "direct", nil), exchangeDeclare("mid", "fanout", nil), bind("top", "mid", "k", true, nil), bind("mid", "pe", "", false, nil),
		exchangeDeclare("alt", "fanout", nil), bind("alt", "pa", "", false, nil),
		exchangeDeclare("withAlt", "direct", table("alternate-exchange", str("alt"))))
	headers := &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{
		{Key: "CC", Value: &proto.Value{Kind: &proto.Value_Array{Array: &proto.Array{Values: []*proto.Value{str("pc")}}}}},
		{Key: "BCC", Value: &proto.Value{Kind: &proto.Value_Array{Array: &proto.Array{Values: []*proto.Value{str("pb")}}}}},
	}}}
	applyOK(t, m, 4, publish("top", "k", "e2e", nil), publish("withAlt", "none", "alt", nil), publish("", "nothing", "ccbcc", headers))
	out := m.Outbox(0, 0)
	if len(out) != 3 {
		t.Fatalf("outbox %+v", out)
	}
	for i, want := range [][]string{{"pe"}, {"pa"}, {"pc", "pb"}} {
		if !slices.Equal(out[i].Queues, want) {
			t.Errorf("entry %d to %v, want %v", i, out[i].Queues, want)
		}
	}
	e := out[2]
	if got := headerKeys(e.Properties, "BCC"); len(got) != 1 || !strings.Contains(got[0], "pb") {
		t.Fatalf("entry properties %v: want the BCC", e.Properties)
	}
	g := queueGroup(t, 2, declare("pc", nil), declare("pb", nil))
	fsmtest.One(t, g, 5, consume("pb", "t", ch1, 10))
	_, rec := fsmtest.One(t, g, 5, e.HandOffCommand(m.Group(), fsmtest.Body(e.Body), e.Queues))
	if ready(t, g, "pc") != 1 || len(rec.Deliveries) != 1 {
		t.Fatalf("the group holds %d in pc, delivered %d", ready(t, g, "pc"), len(rec.Deliveries))
	}
	if d := rec.Deliveries[0]; string(d.Body) != "ccbcc" || len(headerKeys(d.Properties, "BCC")) != 0 || len(headerKeys(d.Properties, "CC")) != 1 || d.Group != 2 {
		t.Fatalf("delivery %+v", d)
	}
	// Handed off again (a second leader): applied once, from source 0.
	if r, _ := fsmtest.One(t, g, 6, e.HandOffCommand(m.Group(), fsmtest.Body(e.Body), e.Queues)); r.GetRouted() || ready(t, g, "pc") != 1 || !g.HandedOff(0, e.Key) {
		t.Fatalf("the second hand-off: %v, pc holds %d", r, ready(t, g, "pc"))
	}
	// An Enqueue the metadata log applies for a queue placed since
	// follows the queue: to the outbox, not into the record.
	if r, _ := fsmtest.One(t, m, 7, fsmtest.Enqueue("/", "", "pe", "late", nil, "pe")); !r.GetRouted() || ready(t, m, "pe") != 0 ||
		!slices.Equal(m.Outbox(3, 0)[0].Queues, []string{"pe"}) {
		t.Fatalf("enqueue into a placed queue: %v", r)
	}
}

// A dead letter of a queue the metadata group holds, routed to a placed
// queue, leaves through the outbox with its death; the metadata group's
// own targets take theirs as ever.
func TestPlacement_DeadLetterIntoPlacedQueue(t *testing.T) {
	m := placing(t, "q1")
	applyOK(t, m, 3, exchangeDeclare("dlx", "fanout", nil), declare("p", nil), exclusiveDeclare("local"),
		bind("dlx", "p", "", false, nil), bind("dlx", "local", "", false, nil),
		&proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "src", Exclusive: true, Connection: conn1,
			Arguments: table("x-message-ttl", i64(10), "x-dead-letter-exchange", str("dlx"))}}})
	applyOK(t, m, 4, publish("", "src", "dies", nil))
	if m.OutboxLen() != 0 {
		t.Fatal("an entry before the death")
	}
	applyOK(t, m, 50, expire("src"))
	if ready(t, m, "src") != 0 || ready(t, m, "local") != 1 {
		t.Fatal("the dead letter did not reach the metadata group's queue")
	}
	out := m.Outbox(0, 0)
	if len(out) != 1 {
		t.Fatalf("outbox %+v", out)
	}
	e := out[0]
	if !e.DeadLettered || !slices.Equal(e.Queues, []string{"p"}) || e.Exchange != "dlx" || len(headerKeys(e.Properties, "x-death")) != 1 ||
		string(fsmtest.Body(e.Body)) != "dies" {
		t.Fatalf("entry %+v", e)
	}
}

// A delayed exchange's release routed to a placed queue leaves through
// the outbox.
func TestPlacement_DelayedReleaseIntoPlacedQueue(t *testing.T) {
	m := placing(t, "q1")
	applyOK(t, m, 3, delayedX("dx", "direct"), declare("p", nil), bind("dx", "p", "k", false, nil))
	applyOK(t, m, 4, publish("dx", "k", "later", withDelay(i64(100))))
	if m.OutboxLen() != 0 {
		t.Fatal("an entry before the release")
	}
	applyOK(t, m, 200, fsmtest.ReleaseDelayed(10))
	out := m.Outbox(0, 0)
	if len(out) != 1 || !slices.Equal(out[0].Queues, []string{"p"}) || out[0].Exchange != "dx" || string(fsmtest.Body(out[0].Body)) != "later" {
		t.Fatalf("outbox %+v", out)
	}
}

// The commands on a placed queue's messages are its group's: refused
// here, never applied, naming the group for the node to send them to.
// Deleting it removes its record and bindings.
func TestPlacement_MessagesCommandsRefused(t *testing.T) {
	m := placing(t, "q1", "q2")
	applyOK(t, m, 3, declare("a", nil), declare("p", nil), exchangeDeclare("fx", "fanout", nil), bind("fx", "p", "", false, nil))
	want := "PRECONDITION_FAILED - queue 'p' in vhost '/' lives in group q2"
	for name, c := range map[string]*proto.Command{
		"consume": consume("p", "t", ch1, 1),
		"get":     get("p", false),
		"purge":   {Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{Vhost: "/", Name: "p"}}},
	} {
		if r, _ := fsmtest.One(t, m, 4, c); r.GetCode() != 406 || r.GetText() != want || r.GetPlacedIn() != "q2" {
			t.Errorf("%s: %v", name, r)
		}
	}
	if len(m.Consumers("/")) != 0 {
		t.Fatal("a consumer on a placed queue")
	}
	r, _ := fsmtest.One(t, m, 5, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "p", IfEmpty: true, IfUnused: true}}})
	if r.GetCode() != 0 || len(m.Bindings("/")) != 0 {
		t.Fatalf("delete %v, bindings %v", r, m.Bindings("/"))
	}
	if ds, _ := m.PlacedMissing("q2", func(string, string) bool { return false }); ds != nil {
		t.Fatal("a deleted queue is still placed")
	}
	if r, _ := fsmtest.One(t, m, 6, publish("fx", "", "x", nil)); r.GetRouted() || m.OutboxLen() != 0 {
		t.Fatalf("a publish routed to a deleted queue: %v", r)
	}
}

// Every delivery names the log that assigned it: 0 in the metadata
// group, the group's number in a queue group; basic.get's too.
func TestDelivery_Group(t *testing.T) {
	meta := fsmtest.New(t)
	g := queueGroup(t, 3)
	for _, m := range []*fsm.Machine{meta, g} {
		applyOK(t, m, 5, declare("q", nil), declare("r", nil), consume("q", "t", ch1, 10))
		_, rec := fsmtest.Apply(t, m, 6, fsmtest.Enqueue("/", "", "q", "x", nil, "q"), fsmtest.Enqueue("/", "", "r", "y", nil, "r"))
		if len(rec.Deliveries) != 1 || rec.Deliveries[0].Group != m.Group() {
			t.Fatalf("group %d: deliveries %+v", m.Group(), rec.Deliveries)
		}
		if r, _ := fsmtest.One(t, m, 7, get("r", false)); r.GetGet() == nil || r.GetGet().GetGroup() != m.Group() {
			t.Fatalf("group %d: get %v", m.Group(), r)
		}
	}
}

// PublishRoute tells a routing node the queues a publish reaches in each
// group, CC and BCC included, and leaves to the log what only it decides.
func TestPlacement_PublishRouteByGroup(t *testing.T) {
	m := placing(t, "q1", "q2")
	applyOK(t, m, 3, exclusiveDeclare("own"))
	for _, q := range []string{"a", "b"} {
		applyOK(t, m, 3, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: q, Durable: true}}})
	}
	applyOK(t, m, 3, exchangeDeclare("fan", "fanout", nil), bind("fan", "a", "", false, nil), bind("fan", "own", "", false, nil),
		&proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "in", Type: "fanout", Internal: true}}},
		bind("in", "b", "", false, nil))
	pub := func(x, key string, headers *proto.Table, expiration *string) *proto.Publish {
		return &proto.Publish{Vhost: "/", Exchange: x, RoutingKey: key, Properties: &proto.Properties{Headers: headers, Expiration: expiration}}
	}
	bad := "soon"
	for name, c := range map[string]struct {
		p    *proto.Publish
		want map[string][]string
	}{
		"fanout across groups": {pub("fan", "", nil, nil), map[string][]string{"": {"own"}, "q1": {"a"}}},
		"default, CC and BCC":  {pub("", "a", table("CC", &proto.Value{Kind: &proto.Value_Array{Array: &proto.Array{Values: []*proto.Value{str("b")}}}}), nil), map[string][]string{"q1": {"a"}, "q2": {"b"}}},
		"no queue":             {pub("", "nowhere", nil, nil), nil},
		"missing exchange":     {pub("gone", "", nil, nil), nil},
		"internal exchange":    {pub("in", "", nil, nil), nil},
		"expiration refused":   {pub("", "a", nil, &bad), nil},
	} {
		got, ok := m.PublishRoute(c.p)
		if ok != (c.want != nil) || len(got) != len(c.want) {
			t.Errorf("%s: %v %v, want %v", name, got, ok, c.want)
			continue
		}
		for g, qs := range c.want {
			if !slices.Equal(got[g], qs) {
				t.Errorf("%s: group %q gets %v, want %v", name, g, got[g], qs)
			}
		}
	}
}

// SettingsGen moves with what a group's mirror reads other than which
// queues there are (a policy, a vhost, a restore) and stays put under the
// message flow, which a busy log applies by the thousand, and under queue
// declares and deletes, which QueueChanges names instead: a mirror that
// saw the same numbers and no queue changes skips its round.
func TestSettingsGen_MovesWithWhatTheMirrorReadsOnly(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1, declare("q", nil))
	g := m.SettingsGen()
	for i, c := range []*proto.Command{publish("", "q", "a", nil), get("q", true), consume("q", "c", ch1, 10),
		{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}, bind("amq.direct", "q", "k", false, nil), declare("r", nil),
		{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "r"}}}} {
		fsmtest.One(t, m, int64(2+i), c)
		if m.SettingsGen() != g {
			t.Fatalf("%T moved the settings number", c.GetCmd())
		}
	}
	for i, c := range []*proto.Command{policySetCmd("p"), {Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "v2"}}}} {
		fsmtest.One(t, m, int64(10+i), c)
		if m.SettingsGen() == g {
			t.Fatalf("%T left the settings number as it was", c.GetCmd())
		}
		g = m.SettingsGen()
	}
	r := roundTrip(t, m)
	if r.SettingsGen() == g || r.SettingsGen() == 0 {
		t.Fatalf("a restored machine shows settings number %d, the original %d", r.SettingsGen(), g)
	}
}

func policySetCmd(name string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: "/", Name: name, Pattern: ".*",
		ApplyTo: "queues", Definition: &proto.PolicyDefinition{MessageTtl: ptr(int64(1000))}}}}
}

// x-quorum-initial-group-size (level 18): a queue asking for more
// replicas than a queue group has members stays in the metadata group,
// on every voter; one asking for as many or fewer goes to a group with
// at least that many, and a size that is not a positive integer is
// refused as RabbitMQ refuses it. Below level 18 the argument was
// accepted whatever its value and placement ignored it.
func TestPlacement_InitialGroupSize(t *testing.T) {
	m := fsmtest.New(t)
	applyOK(t, m, 2, queueGroupsCmd(groupSpec("q1", "a", "b", "c"), groupSpec("q2", "a", "b", "c", "d", "e")), fsmtest.PlaceQueues())
	size := func(n int64) *proto.Table { return table("x-quorum-initial-group-size", i64(n)) }
	applyOK(t, m, 3, declare("one", size(1)), declare("three", size(3)), declare("four", size(4)),
		declare("five", size(5)), declare("seven", size(7)), declare("plain", nil))
	want := map[string]string{"one": "q1", "three": "q2", "four": "q2", "five": "q2", "seven": "", "plain": "q1"}
	for q, g := range want {
		if got := placementOf(t, m, q); got != g {
			t.Errorf("%s placed in %q, want %q", q, got, g)
		}
	}
	for _, c := range []struct {
		v    *proto.Value
		want string
	}{
		{i64(0), "{value_zero,0}"},
		{i64(-2), "{value_negative,-2}"},
		{str("3"), `"expected integer, got longstr"`},
	} {
		r, _ := fsmtest.One(t, m, 4, declare("bad", table("x-quorum-initial-group-size", c.v)))
		if want := "PRECONDITION_FAILED - invalid arg 'x-quorum-initial-group-size' for queue 'bad' in vhost '/': " + c.want; r.GetCode() != 406 || r.GetText() != want {
			t.Errorf("declare with %v: %d %q, want 406 %q", c.v, r.GetCode(), r.GetText(), want)
		}
	}
	if _, ok := m.QueuePlacement("/", "bad"); ok {
		t.Fatal("a refused declare left a queue")
	}

	old := fsmtest.NewAt(t, 17)
	applyOK(t, old, 2, queueGroupsCmd(groupSpec("q1", "a", "b", "c")), fsmtest.PlaceQueues(),
		declare("seven", size(7)), declare("zero", size(0)))
	if placementOf(t, old, "seven") != "q1" || placementOf(t, old, "zero") != "q1" {
		t.Fatal("level 17 placed by the group size, or refused a size")
	}
	// A replica restored from a snapshot places as one that replayed.
	r := roundTrip(t, m)
	applyOK(t, r, 5, declare("six", size(6)))
	applyOK(t, m, 5, declare("six", size(6)))
	if placementOf(t, r, "six") != "" || r.Digest() != m.Digest() {
		t.Fatal("a restored replica places otherwise")
	}
}

// declareFrom is declare from a connection of node.
func declareFrom(node, name string, args *proto.Table) *proto.Command {
	c := declare(name, args)
	c.GetQueueDeclare().Connection = &proto.ConnectionRef{Node: node, Connection: "c1"}
	return c
}

// x-queue-leader-locator (level 20): client-local places a queue in a
// group the declaring node is meant to lead, else one it is a member of,
// else any, the fewest placed first within each; balanced, and a declare
// of no connection, place as without it. A name RabbitMQ does not know
// is refused as RabbitMQ refuses it. Below level 20 the argument was
// accepted whatever its value and placement ignored it.
func TestPlacement_LeaderLocator(t *testing.T) {
	m := fsmtest.New(t)
	applyOK(t, m, 2, queueGroupsCmd(groupSpec("q1", "a", "b", "c"), groupSpec("q2", "b", "c", "d"), groupSpec("q3", "c", "d", "e")), fsmtest.PlaceQueues())
	local := table("x-queue-leader-locator", str("client-local"))
	applyOK(t, m, 3,
		declareFrom("c", "c-1", local), declareFrom("c", "c-2", local), // q3, then q3 again: c leads it
		declareFrom("d", "d-1", local), // d leads none: its groups q2 and q3, q2 the fewer
		declareFrom("f", "f-1", local), // f is in none: the fewest, q1
		declareFrom("a", "bal", table("x-queue-leader-locator", str("balanced"))),
		declare("none", local), // no connection: balanced
	)
	want := map[string]string{"c-1": "q3", "c-2": "q3", "d-1": "q2", "f-1": "q1", "bal": "q1", "none": "q2"}
	for q, g := range want {
		if got := placementOf(t, m, q); got != g {
			t.Errorf("%s placed in %q, want %q", q, got, g)
		}
	}
	for _, name := range []string{"random", "least-leaders"} {
		applyOK(t, m, 4, declareFrom("c", name, table("x-queue-leader-locator", str(name))))
	}
	for _, c := range []struct {
		v    *proto.Value
		want string
	}{
		{str("nearest"), "invalid_queue_locator_arg"},
		{i64(1), "{unacceptable_type,long}"},
	} {
		r, _ := fsmtest.One(t, m, 5, declareFrom("c", "bad", table("x-queue-leader-locator", c.v)))
		if want := "PRECONDITION_FAILED - invalid arg 'x-queue-leader-locator' for queue 'bad' in vhost '/': " + c.want; r.GetCode() != 406 || r.GetText() != want {
			t.Errorf("declare with %v: %d %q, want 406 %q", c.v, r.GetCode(), r.GetText(), want)
		}
	}

	old := fsmtest.NewAt(t, 19)
	applyOK(t, old, 2, queueGroupsCmd(groupSpec("q1", "a", "b", "c"), groupSpec("q2", "b", "c", "d")), fsmtest.PlaceQueues(),
		declareFrom("d", "d-1", local), declareFrom("d", "odd", table("x-queue-leader-locator", str("nearest"))))
	if placementOf(t, old, "d-1") != "q1" || placementOf(t, old, "odd") != "q2" {
		t.Fatal("level 19 placed by the leader locator, or refused one")
	}
	r := roundTrip(t, m)
	applyOK(t, r, 6, declareFrom("e", "e-1", local))
	applyOK(t, m, 6, declareFrom("e", "e-1", local))
	if placementOf(t, r, "e-1") != "q3" || r.Digest() != m.Digest() {
		t.Fatal("a restored replica places otherwise")
	}
}

// A queue group's log takes a declare whatever its locator says: the
// metadata log took it, below level 20 maybe with a name it now refuses.
func TestPlacement_AGroupTakesAnyLocatorTheMetadataTook(t *testing.T) {
	g := queueGroup(t, 1)
	applyOK(t, g, 3, declare("odd", table("x-queue-leader-locator", str("nearest"))))
}

// A policy's queue-leader-locator (level 21) places as the argument does
// and wins over it, as RabbitMQ's policy value wins; a name the argument
// does not take is refused. At level 20 the key was kept but placement
// did not read it, and any value was taken.
func TestPlacement_LeaderLocatorPolicy(t *testing.T) {
	locator := func(s string) *proto.PolicyDefinition { return &proto.PolicyDefinition{QueueLeaderLocator: &s} }
	groups := queueGroupsCmd(groupSpec("q1", "a", "b", "c"), groupSpec("q2", "b", "c", "d"), groupSpec("q3", "c", "d", "e"))
	m := fsmtest.New(t)
	applyOK(t, m, 2, groups, fsmtest.PlaceQueues(),
		policySet("local", "^local-", 0, false, locator("client-local")),
		policySet("bal", "^bal-", 0, false, locator("balanced")))
	applyOK(t, m, 3,
		declareFrom("c", "local-1", nil),                                                // q3: c leads it
		declareFrom("c", "local-2", nil),                                                // q3 again, though it holds the most
		declareFrom("c", "bal-1", table("x-queue-leader-locator", str("client-local"))), // the policy wins: the fewest, q1
		declareFrom("c", "other", nil),                                                  // no policy, no argument: the fewest, q2
	)
	want := map[string]string{"local-1": "q3", "local-2": "q3", "bal-1": "q1", "other": "q2"}
	for q, g := range want {
		if got := placementOf(t, m, q); got != g {
			t.Errorf("%s placed in %q, want %q", q, got, g)
		}
	}
	r, _ := fsmtest.One(t, m, 4, policySet("odd", "^odd-", 0, false, locator("nearest")))
	if want := "PRECONDITION_FAILED - invalid queue-leader-locator 'nearest'"; r.GetCode() != 406 || r.GetText() != want {
		t.Errorf("policy with locator nearest: %d %q, want 406 %q", r.GetCode(), r.GetText(), want)
	}
	rt := roundTrip(t, m)
	applyOK(t, rt, 5, declareFrom("c", "local-3", nil))
	applyOK(t, m, 5, declareFrom("c", "local-3", nil))
	if placementOf(t, rt, "local-3") != "q3" || rt.Digest() != m.Digest() {
		t.Fatal("a restored replica places otherwise")
	}

	old := fsmtest.NewAt(t, 20)
	applyOK(t, old, 2, groups, fsmtest.PlaceQueues(),
		policySet("local", "^local-", 0, false, locator("client-local")),
		policySet("odd", "^odd-", 0, false, locator("nearest")),
		declareFrom("c", "local-1", nil), declareFrom("c", "local-2", nil))
	if placementOf(t, old, "local-1") != "q1" || placementOf(t, old, "local-2") != "q2" {
		t.Fatal("level 20 placed by a policy's leader locator")
	}
}

// A queue with its own x-expires stays in the metadata group, where its
// lease runs, below level 24, and is placed like any other from 24 on:
// its group runs the lease, and the metadata runs none for it. A replica
// that replays the raise and one restored from a snapshot taken before
// it place alike.
func TestPlacement_AnXExpiresQueueIsPlacedFromLevel24(t *testing.T) {
	exp := func(name string) *proto.Command { return declare(name, table("x-expires", i64(100))) }
	m := placingAt(t, 23, "q1", "q2")
	applyOK(t, m, 3, exp("before"))
	if g := placementOf(t, m, "before"); g != "" {
		t.Fatalf("at level 23 an x-expires queue placed in %q", g)
	}
	restored := roundTrip(t, m)
	for _, r := range []*fsm.Machine{m, restored} {
		applyOK(t, r, 4, fsmtest.SetProtocol(24), exp("after"), declare("plain", nil))
	}
	for _, r := range []*fsm.Machine{m, restored} {
		if placementOf(t, r, "before") != "" || placementOf(t, r, "after") != "q1" || placementOf(t, r, "plain") != "q2" {
			t.Fatalf("placed: before %q, after %q, plain %q; want the metadata, q1, q2",
				placementOf(t, r, "before"), placementOf(t, r, "after"), placementOf(t, r, "plain"))
		}
	}
	if restored.Digest() != m.Digest() {
		t.Fatal("a replica restored before the raise differs")
	}
	// The metadata's lease runs for the queue it holds, not for the
	// placed one.
	due := m.DueLeases(m.Clock() + 1000)
	if len(due) != 1 || due[0].GetName() != "before" {
		t.Fatalf("the metadata's leases due: %v, want before's alone", due)
	}
}
