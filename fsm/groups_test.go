package fsm_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// queueGroup is a queue group's machine (group id) at fsm.Protocol with
// queues declared: no exchanges but the defaults the vhost has.
func queueGroup(t *testing.T, id uint32, queues ...*proto.Command) *fsm.Machine {
	t.Helper()
	return queueGroupAt(t, fsm.Protocol, id, queues...)
}

// queueGroupAt is queueGroup with the log at level.
func queueGroupAt(t *testing.T, level, id uint32, queues ...*proto.Command) *fsm.Machine {
	t.Helper()
	m := fsmtest.NewAt(t, level)
	if r, _ := fsmtest.One(t, m, 2, fsmtest.GroupInit(id)); r.GetCode() != 0 {
		t.Fatalf("GroupInit: %v", r)
	}
	for _, c := range queues {
		if r, _ := fsmtest.One(t, m, 2, c); r.GetCode() != 0 {
			t.Fatalf("declare: %v", r)
		}
	}
	return m
}

// A pre-routed Enqueue gives each queue what a routed Publish gives it:
// copies, TTL, overflow refusal (the confirm's nack), deliveries.
func TestEnqueue_AsRoutedPublish(t *testing.T) {
	queues := []*proto.Command{
		declare("a", table("x-message-ttl", i64(50))),
		declare("b", table("x-max-length", i64(1), "x-overflow", str("reject-publish"))),
	}
	routed := fsmtest.New(t)
	for _, c := range append(queues, exchangeDeclare("x", "fanout", nil), bind("x", "a", "", false, nil), bind("x", "b", "", false, nil)) {
		fsmtest.One(t, routed, 2, c)
	}
	pre := queueGroup(t, 7, queues...)
	for _, m := range []*fsm.Machine{routed, pre} {
		fsmtest.One(t, m, 3, consume("a", "t", ch1, 10))
	}
	props := &proto.Properties{MessageId: ptr("m"), Headers: table("CC", str("c"))}
	var got [2][]string
	for i, m := range []*fsm.Machine{routed, pre} {
		for n, body := range []string{"one", "two"} {
			c := publish("x", "k", body, props)
			if m == pre {
				c = fsmtest.Enqueue("/", "x", "k", body, props, "a", "b", "a", "gone")
			}
			r, rec := fsmtest.One(t, m, int64(10+n), c)
			r.Index = 0
			got[i] = append(got[i], r.String())
			for _, d := range rec.Deliveries {
				got[i] = append(got[i], d.Exchange+" "+d.RoutingKey+" "+string(d.Body)+" "+d.Properties.String())
			}
		}
		fsmtest.One(t, m, 100, expire("a", "b"))
		for _, q := range m.Queues("/") {
			got[i] = append(got[i], q.String())
		}
		st := m.Stats()
		st.Published, st.Queues = 0, 0
		got[i] = append(got[i], fmtStats(st))
	}
	if len(got[0]) != len(got[1]) {
		t.Fatalf("routed publish:\n%q\npre-routed enqueue:\n%q", got[0], got[1])
	}
	for i := range got[0] {
		if got[0][i] != got[1][i] {
			t.Errorf("%d: routed %q, pre-routed %q", i, got[0][i], got[1][i])
		}
	}
	if pre.Stats().Refused != 1 || pre.Stats().Routed != 3 {
		t.Fatalf("stats %+v: want 3 routed copies, 1 refused", pre.Stats())
	}
}

func fmtStats(s fsm.Stats) string {
	return fmt.Sprint(s.Routed, s.Delivered, s.Expired, s.Refused, s.Ready, s.Unacked, s.DeadLettered)
}

// Below level 13 the group commands are refused and change nothing: a
// state below it is written in a format without groups.
func TestGroups_RefusedBelowTheirLevel(t *testing.T) {
	m := fsmtest.NewAt(t, 12)
	fsmtest.One(t, m, 2, declare("q", nil))
	before := m.Digest()
	for _, c := range []*proto.Command{fsmtest.GroupInit(3), fsmtest.Enqueue("/", "", "q", "b", nil, "q"), handOff(1, 1, "b", false, "q"), fsmtest.HandOffDone(1)} {
		r, _ := fsmtest.One(t, m, 3, c)
		if r.GetCode() != replycode.NotImplemented {
			t.Errorf("%v at level 12: %v, want 540", c, r)
		}
	}
	n := fsmtest.NewAt(t, 12)
	fsmtest.One(t, n, 2, declare("q", nil))
	for range 4 {
		fsmtest.One(t, n, 3, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
	}
	if m.Digest() != n.Digest() || before == m.Digest() && m.AppliedIndex() == 0 {
		t.Fatal("a refused group command changed the state")
	}
	if ready(t, m, "q") != 0 {
		t.Fatal("the refused enqueue enqueued")
	}
}

func TestGroupInit_IdNeverChanges(t *testing.T) {
	m := queueGroup(t, 4)
	if r, _ := fsmtest.One(t, m, 3, fsmtest.GroupInit(4)); r.GetCode() != 0 {
		t.Fatalf("the same id again: %v", r)
	}
	if r, _ := fsmtest.One(t, m, 3, fsmtest.GroupInit(5)); r.GetCode() != replycode.PreconditionFailed {
		t.Fatalf("another id: %v, want 406", r)
	}
	if m.Group() != 4 {
		t.Fatalf("group %d, want 4", m.Group())
	}
}

func handOff(source uint32, key uint64, body string, dead bool, queues ...string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_HandOff{HandOff: &proto.HandOff{SourceGroup: source, Key: key, DeadLettered: dead,
		Message: &proto.Enqueue{Vhost: "/", Exchange: "dlx", RoutingKey: "k", Body: []byte(body), Queues: queues}}}}
}

// A queue group holds no exchanges: a message dying into its queue's
// dead-letter exchange waits in the outbox, with what the leader routes it
// by; the metadata group (and a cluster of one group) drops it as before.
func TestGroup_DeadLetterIntoOutbox(t *testing.T) {
	args := table("x-message-ttl", i64(10), "x-dead-letter-exchange", str("dlx"), "x-dead-letter-routing-key", str("dk"))
	g := queueGroup(t, 2, declare("q", args))
	one := fsmtest.New(t)
	fsmtest.One(t, one, 2, declare("q", args))
	for _, m := range []*fsm.Machine{g, one} {
		fsmtest.One(t, m, 3, fsmtest.Enqueue("/", "src", "rk", "body", &proto.Properties{MessageId: ptr("m1")}, "q"))
		fsmtest.One(t, m, 20, expire("q"))
		if ready(t, m, "q") != 0 {
			t.Fatal("the message did not die")
		}
	}
	if one.OutboxLen() != 0 {
		t.Fatal("a machine of no queue group put a dead letter in an outbox")
	}
	out := g.Outbox(0, 0)
	if len(out) != 1 {
		t.Fatalf("outbox %v, want one entry", out)
	}
	e := out[0]
	if e.Key != 1 || e.Vhost != "/" || e.Exchange != "dlx" || len(e.RoutingKeys) != 1 || e.RoutingKeys[0] != "dk" || !e.DeadLettered {
		t.Fatalf("entry %+v", e)
	}
	if e.Properties.GetMessageId() != "m1" || len(headerKeys(e.Properties, "x-first-death-reason")) == 0 {
		t.Fatalf("properties %v: want the message's, with its death", e.Properties)
	}
	if string(fsmtest.Body(e.Body)) != "body" {
		t.Fatalf("body %q", fsmtest.Body(e.Body))
	}
	if g.Outbox(1, 0) != nil {
		t.Fatal("Outbox after its only key listed something")
	}
	w, _ := g.Snapshot()
	if bs := fsm.Bodies(w.(fsm.BodyLister)); len(bs) != 1 || bs[0] != e.Body {
		t.Fatalf("snapshot bodies %v, want the outbox's %v", bs, e.Body)
	}
	w.(fsm.Releaser).Release()
	if r, _ := fsmtest.One(t, g, 30, fsmtest.HandOffDone(1)); r.GetMessageCount() != 1 || g.OutboxLen() != 0 {
		t.Fatalf("HandOffDone: %v, outbox %d", r, g.OutboxLen())
	}
}

func headerKeys(p *proto.Properties, key string) []string {
	var out []string
	for _, f := range p.GetHeaders().GetFields() {
		if f.GetKey() == key {
			out = append(out, f.GetValue().String())
		}
	}
	return out
}

// The dead letter crosses: the target enqueues the copy as a dead letter
// routed in its own group would be, and its cycle check holds.
func TestHandOff_DeadLetterArrives(t *testing.T) {
	src := queueGroup(t, 1, declare("q", table("x-message-ttl", i64(10), "x-dead-letter-exchange", str("dlx"))))
	dst := queueGroup(t, 2, declare("d", nil), declare("q", nil))
	fsmtest.One(t, dst, 3, consume("d", "t", ch1, 10))
	fsmtest.One(t, src, 3, fsmtest.Enqueue("/", "", "q", "payload", nil, "q"))
	fsmtest.One(t, src, 20, expire("q"))
	e := src.Outbox(0, 0)[0]
	// The leader's routing found d, and q, the queue it died in: a cycle.
	_, rec := fsmtest.One(t, dst, 21, e.HandOffCommand(src.Group(), fsmtest.Body(e.Body), []string{"d", "q"}))
	if len(rec.Deliveries) != 1 {
		t.Fatalf("deliveries %v", rec.Deliveries)
	}
	d := rec.Deliveries[0]
	if string(d.Body) != "payload" || d.Exchange != "dlx" || d.RoutingKey != "q" || len(headerKeys(d.Properties, "x-death")) != 1 {
		t.Fatalf("delivery %+v", d)
	}
	if ready(t, dst, "q") != 0 || dst.Stats().DeadLettered != 1 {
		t.Fatalf("q holds %d, dead-lettered %d: the copy into the queue it died in is a cycle", ready(t, dst, "q"), dst.Stats().DeadLettered)
	}
	if !dst.HandedOff(1, e.Key) || dst.HandedOff(1, e.Key+1) || dst.HandedOff(2, e.Key) {
		t.Fatal("HandedOff")
	}
}

// sourceLog is a source group's log making n dead letters, and the
// machine that applied it.
func sourceLog(t *testing.T, n int) (*fsm.Machine, []fsm.OutboxEntry) {
	src := queueGroup(t, 1, declare("q", table("x-max-length", i64(1), "x-dead-letter-exchange", str("dlx"))))
	for i := range n + 1 {
		fsmtest.One(t, src, int64(3+i), fsmtest.Enqueue("/", "", "q", string(rune('a'+i)), nil, "q"))
	}
	out := src.Outbox(0, 0)
	if len(out) != n {
		t.Fatalf("%d in the outbox, want %d", len(out), n)
	}
	return src, out
}

// Exactly once: hand-offs proposed in any order, each any number of times,
// leave the target with each message once; a replica restored from a
// snapshot after any entry and replaying the rest ends in the same state,
// and digests agree.
func TestHandOff_ExactlyOnceProperty(t *testing.T) {
	const n = 12
	_, out := sourceLog(t, n)
	cmds := make([]*proto.Command, n)
	for i := range out {
		cmds[i] = out[i].HandOffCommand(1, fsmtest.Body(out[i].Body), []string{"d"})
	}
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 33))
		var log [][]*proto.Command
		for _, i := range r.Perm(n) {
			for range 1 + r.IntN(3) {
				log = append(log, []*proto.Command{cmds[i]})
			}
		}
		r.Shuffle(len(log), func(i, j int) { log[i], log[j] = log[j], log[i] })
		// A source replaying its outbox after a restore hands all of it
		// again, in order.
		for i := range cmds {
			if r.IntN(2) == 0 {
				log = append(log, []*proto.Command{cmds[i]})
			}
		}
		want := replayGroupLog(t, log, -1)
		if got := ready(t, want, "d"); got != n {
			t.Fatalf("seed %d: d holds %d, want %d", seed, got, n)
		}
		bodies := map[string]bool{}
		for range n {
			res, _ := fsmtest.One(t, want, 1000, get("d", true))
			bodies[string(res.GetGet().GetBody())] = true
		}
		if len(bodies) != n {
			t.Fatalf("seed %d: %d distinct bodies, want %d", seed, len(bodies), n)
		}
		full := replayGroupLog(t, log, -1)
		for at := range log {
			if got := replayGroupLog(t, log, at); got.Digest() != full.Digest() {
				t.Fatalf("seed %d: restored after entry %d, digest differs from the replica that replayed", seed, at)
			}
		}
	}
}

// replayGroupLog applies log to a target group holding d, restored from
// its snapshot after entry restoreAt (none when negative).
func replayGroupLog(t *testing.T, log [][]*proto.Command, restoreAt int) *fsm.Machine {
	t.Helper()
	m := queueGroup(t, 2, declare("d", nil))
	for i, cmds := range log {
		fsmtest.Apply(t, m, int64(100+i), cmds...)
		if i == restoreAt {
			m = roundTrip(t, m)
		}
	}
	return m
}

// The source's outbox is state: HandOffDone in any order and repeated
// forgets each entry once, a snapshot carries what is left, and replicas
// agree.
func TestHandOffDone_Property(t *testing.T) {
	const n = 10
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 34))
		a, _ := sourceLog(t, n)
		b := roundTrip(t, a)
		done := 0
		for range 6 {
			c := fsmtest.HandOffDone(uint64(1 + r.IntN(n+2)))
			fsmtest.One(t, a, 500, c)
			fsmtest.One(t, b, 500, c)
			b = roundTrip(t, b)
			if a.Digest() != b.Digest() {
				t.Fatalf("seed %d: digests differ", seed)
			}
			out := a.Outbox(0, 0)
			upTo := c.GetHandOffDone().GetUpTo()
			if len(out) > 0 && out[0].Key <= upTo {
				t.Fatalf("seed %d: key %d left after done up to %d", seed, out[0].Key, upTo)
			}
			done = max(done, int(upTo))
			if len(out) != n-min(n, done) {
				t.Fatalf("seed %d: %d left after done up to %d, want %d", seed, len(out), done, n-min(n, done))
			}
		}
	}
}

// Every way a message dies (max-length, rejection, TTL) leaves a queue
// group through the outbox, even into an exchange the group's log holds
// (a vhost's default exchanges come with its VhostPut): a queue group
// routes on the metadata group's bindings, never its own.
func TestGroup_EveryDeathLeaves(t *testing.T) {
	g := queueGroup(t, 3, declare("q", table("x-max-length", i64(1), "x-dead-letter-exchange", str("dlx"))),
		declare("local", table("x-dead-letter-exchange", str("held"))), declare("sink", nil),
		exchangeDeclare("held", "fanout", nil), bind("held", "sink", "", false, nil))
	fsmtest.One(t, g, 3, fsmtest.Enqueue("/", "", "q", "1", nil, "q"))
	fsmtest.One(t, g, 3, fsmtest.Enqueue("/", "", "q", "2", expiring("5"), "q")) // drops 1
	fsmtest.One(t, g, 20, expire("q"))                                           // 2 expires
	fsmtest.One(t, g, 21, fsmtest.Enqueue("/", "", "q", "3", nil, "q"))
	fsmtest.One(t, g, 22, get("q", false))
	fsmtest.One(t, g, 23, discard(ch1, 1, false)) // 3 rejected
	var reasons []string
	for _, e := range g.Outbox(0, 0) {
		reasons = append(reasons, string(fsmtest.Body(e.Body))+" "+headerKeys(e.Properties, "x-first-death-reason")[0])
	}
	want := []string{`1 long_string:"maxlen"`, `2 long_string:"expired"`, `3 long_string:"rejected"`}
	if len(reasons) != len(want) {
		t.Fatalf("outbox %q, want %q", reasons, want)
	}
	for i := range want {
		if reasons[i] != want[i] {
			t.Errorf("outbox %q, want %q", reasons, want)
		}
	}
	fsmtest.One(t, g, 24, fsmtest.Enqueue("/", "", "local", "4", nil, "local"))
	fsmtest.One(t, g, 25, get("local", false))
	fsmtest.One(t, g, 26, discard(ch1, 2, false))
	if g.OutboxLen() != 4 || ready(t, g, "sink") != 0 {
		t.Fatalf("outbox %d, sink %d: a dead letter into an exchange the group's log holds should leave through the outbox", g.OutboxLen(), ready(t, g, "sink"))
	}
}

// The leader refuses what apply could not key state by, and a body or a
// list of queues over the limits a publish has.
func TestGroups_Validate(t *testing.T) {
	long := string(bytes.Repeat([]byte("q"), 256))
	noMessage := handOff(1, 1, "b", true, "q")
	noMessage.GetHandOff().Message = nil
	for name, c := range map[string]*proto.Command{
		"group 0":          fsmtest.GroupInit(0),
		"key 0":            handOff(1, 0, "b", true, "q"),
		"no message":       noMessage,
		"done up to 0":     fsmtest.HandOffDone(0),
		"queue name":       fsmtest.Enqueue("/", "", "k", "b", nil, long),
		"empty queue name": fsmtest.Enqueue("/", "", "k", "b", nil, ""),
		"hand-off queue":   handOff(1, 1, "b", true, long),
		"body":             fsmtest.Enqueue("/", "", "k", "too long", nil, "q"),
	} {
		if err := fsm.Validate(c, fsm.Limits{MaxBody: 4}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, c := range validCommands()[len(validCommands())-4:] {
		if got := fsm.CommandProtocol(c); got != 13 {
			t.Errorf("%s needs protocol %d, want 13", kindOf(c), got)
		}
	}
}

// A deposed source leader proposes from a stale state: a key the source
// acknowledged since (the HandOff of a later leader told the target so)
// changes nothing, even one that never came this way before.
func TestHandOff_StaleAfterAcknowledged(t *testing.T) {
	dst := queueGroup(t, 2, declare("d", nil))
	stale := func(key, done uint64) *proto.Command {
		c := handOff(1, key, "b", true, "d")
		c.GetHandOff().Done = done
		return c
	}
	fsmtest.One(t, dst, 3, stale(2, 0))
	// Keys 1 and 3 went to other groups or nowhere; the source
	// acknowledged up to 3, and key 4 says so.
	fsmtest.One(t, dst, 4, stale(4, 3))
	for _, k := range []uint64{1, 2, 3} {
		fsmtest.One(t, dst, 5, stale(k, 0))
	}
	if got := ready(t, dst, "d"); got != 2 {
		t.Fatalf("d holds %d, want keys 2 and 4 only", got)
	}
	if !dst.HandedOff(1, 3) || dst.HandedOff(1, 5) {
		t.Fatal("the acknowledged prefix is not counted applied")
	}
}

// Route names the queues a publish through the same exchange, keys and
// properties reaches (exchange to exchange, alternate exchange, topic and
// headers bindings, CC and BCC), changes no state (the digest stays), and
// says when a delayed exchange on the way would hold the message.
func TestRoute_AsAPublishRoutes(t *testing.T) {
	m := fsmtest.New(t)
	setup := []*proto.Command{
		declare("a", nil), declare("b", nil), declare("c", nil), declare("d", nil), declare("e", nil),
		exchangeDeclare("ae", "fanout", nil),
		exchangeDeclare("t", "topic", table("alternate-exchange", str("ae"))),
		exchangeDeclare("h", "headers", nil),
		exchangeDeclare("dx", fsm.DelayedExchangeType, table("x-delayed-type", str("direct"))),
		bind("ae", "e", "", false, nil),
		bind("t", "a", "k.*", false, nil),
		bind("t", "h", "k.#", true, nil),
		bind("h", "b", "", false, table("x-match", str("any"), "kind", str("x"))),
		bind("dx", "d", "k", false, nil),
	}
	for i, c := range setup {
		if r, _ := fsmtest.One(t, m, int64(2+i), c); r.GetCode() != 0 {
			t.Fatalf("setup %d: %v", i, r)
		}
	}
	cc := func(keys ...string) *proto.Value {
		var vs []*proto.Value
		for _, k := range keys {
			vs = append(vs, str(k))
		}
		return &proto.Value{Kind: &proto.Value_Array{Array: &proto.Array{Values: vs}}}
	}
	cases := []struct {
		exchange, key string
		props         *proto.Properties
		keys          []string // key, CC and BCC, as the publish reads them
	}{
		{"t", "k.one", &proto.Properties{}, []string{"k.one"}},
		{"t", "k.one.two", &proto.Properties{Headers: table("kind", str("x"), "CC", cc("k.cc"), "BCC", cc("c"))}, []string{"k.one.two", "k.cc", "c"}},
		{"t", "none", &proto.Properties{}, []string{"none"}},
		{"", "c", &proto.Properties{Headers: table("CC", cc("d", "nowhere"))}, []string{"c", "d", "nowhere"}},
		{"dx", "k", &proto.Properties{}, []string{"k"}},
	}
	for i, tc := range cases {
		before := m.Digest()
		got, held, ok := m.Route("/", tc.exchange, tc.keys, tc.props)
		if !ok || held || m.Digest() != before {
			t.Fatalf("case %d: ok %v, held %v, state changed %v", i, ok, held, m.Digest() != before)
		}
		counts := map[string]uint64{}
		for _, q := range m.Queues("/") {
			counts[q.GetName()] = q.GetReady()
		}
		if r, _ := fsmtest.One(t, m, int64(100+i), publish(tc.exchange, tc.key, "m", tc.props)); r.GetCode() != 0 {
			t.Fatalf("case %d: publish %v", i, r)
		}
		var reached []string
		for _, q := range m.Queues("/") {
			if q.GetReady() > counts[q.GetName()] {
				reached = append(reached, q.GetName())
			}
		}
		slices.Sort(got)
		if len(reached) == 0 || !slices.Equal(got, reached) {
			t.Errorf("case %d: Route %v, the publish reached %v", i, got, reached)
		}
	}
	if _, held, ok := m.Route("/", "dx", []string{"k"}, &proto.Properties{Headers: table("x-delay", i64(5000))}); !ok || !held {
		t.Fatalf("a delayed exchange with x-delay: held %v, ok %v", held, ok)
	}
	for _, miss := range [][2]string{{"/", "gone"}, {"nohost", "t"}} {
		if _, _, ok := m.Route(miss[0], miss[1], []string{"k"}, nil); ok {
			t.Fatalf("Route %v: ok", miss)
		}
	}
}

// A queue group's dead letter whose way meets a delayed exchange is
// handed whole to the metadata log with its routing keys (level 19): the
// metadata log routes it there, its delayed exchange holds it until due,
// once however often the hand-off is proposed. Below level 19 the keys
// are not read, as a replica of the release before reads them.
func TestHandOff_RoutedInTheTargetIsHeldByItsDelayedExchange(t *testing.T) {
	src := queueGroup(t, 1, declare("q", table("x-message-ttl", i64(10), "x-dead-letter-exchange", str("dx"), "x-dead-letter-routing-key", str("k"))))
	fsmtest.One(t, src, 3, fsmtest.Enqueue("/", "", "q", "payload", withDelay(i64(500)), "q"))
	fsmtest.One(t, src, 20, expire("q"))
	e := src.Outbox(0, 0)[0]
	cmd := e.RouteHandOffCommand(src.Group(), fsmtest.Body(e.Body))

	meta := delayedSetup(t, "direct")
	fsmtest.One(t, meta, 1500, consume("q", "t", ch1, 10))
	for i, stamp := range []int64{2000, 2001, 2002} {
		r, rec := fsmtest.One(t, meta, stamp, cmd)
		mustOK(t, r)
		if len(rec.Deliveries) != 0 || ready(t, meta, "q") != 0 {
			t.Fatalf("hand-off %d: delivered %d, ready %d: want it held", i, len(rec.Deliveries), ready(t, meta, "q"))
		}
		if due, _, held := meta.NextDelayed(); !held || due != 2500 || meta.Stats().Delayed != 1 {
			t.Fatalf("hand-off %d: held %v due %d, %d delayed: want one, due at 2500", i, held, due, meta.Stats().Delayed)
		}
	}
	if !meta.HandedOff(1, e.Key) {
		t.Fatal("the key is not applied")
	}
	_, rec := fsmtest.One(t, meta, 2499, release())
	if len(rec.Deliveries) != 0 {
		t.Fatal("released before it was due")
	}
	_, rec = fsmtest.One(t, meta, 2500, release())
	if len(rec.Deliveries) != 1 {
		t.Fatalf("%d deliveries at the due time, want 1", len(rec.Deliveries))
	}
	d := rec.Deliveries[0]
	if string(d.Body) != "payload" || d.Exchange != "dx" || d.RoutingKey != "k" || len(headerKeys(d.Properties, "x-death")) != 1 {
		t.Fatalf("delivery %+v", d)
	}
	if meta.Stats().Delayed != 0 {
		t.Fatal("still held after its release")
	}

	old := fsmtest.NewAt(t, 18)
	res, _ := fsmtest.Apply(t, old, 1000, delayedX("dx", "direct"), declare("q", nil), bind("dx", "q", "k", false, nil))
	for _, r := range res {
		mustOK(t, r)
	}
	mustOK(t, first(fsmtest.One(t, old, 2000, cmd)))
	if _, _, held := old.NextDelayed(); held || ready(t, old, "q") != 0 || !old.HandedOff(1, e.Key) {
		t.Fatalf("level 18: held %v, ready %d: want the keys unread, the message routed to no queue", held, ready(t, old, "q"))
	}
}

func first(r *proto.Result, _ *fsmtest.Recorder) *proto.Result { return r }

// Below level 23 a queue group's log proposes no ExpireQueue, neither
// for a policy's expires nor for a queue's own x-expires: a delete there
// would leave the queue in the metadata, whose mirror would declare it
// again, empty, and the lease would empty it again and again. (A
// metadata log at 24 places queues with their own x-expires, and a
// group's log is raised to its level only by the group's leader.) The
// same queue in the metadata group has its lease due. From level 23 on
// the group ends the queue (lease_test.go).
func TestLeases_AQueueGroupBelowLevel23ProposesNone(t *testing.T) {
	expires := policySet("exp", "^q$", 0, false, &proto.PolicyDefinition{Expires: ptr(int64(100))})
	own := declare("own", table("x-expires", i64(100)))
	for _, grouped := range []bool{false, true} {
		var m *fsm.Machine
		if grouped {
			m = queueGroupAt(t, 22, 3, declare("q", nil), expires)
		} else {
			m = fsmtest.New(t)
			for _, c := range []*proto.Command{declare("q", nil), expires} {
				if r, _ := fsmtest.One(t, m, 2, c); r.GetCode() != 0 {
					t.Fatalf("setup: %v", r)
				}
			}
		}
		_, next := m.NextLeaseDue()
		due := m.DueLeases(m.Clock() + 1000)
		if grouped && (next || len(due) != 0) {
			t.Fatalf("a queue group has a lease due (%v) for %v", next, due)
		}
		if !grouped && (!next || len(due) != 1) {
			t.Fatalf("the metadata group has no lease due (%v, %v) for an expires policy", next, due)
		}
		if grouped {
			if r, _ := fsmtest.One(t, m, 3, own); r.GetCode() != 0 {
				t.Fatalf("declare: %v", r)
			}
			if _, next := m.NextLeaseDue(); next || len(m.DueLeases(m.Clock()+1000)) != 0 {
				t.Fatalf("a queue group below level 23 has a lease due (%v) for %v", next, m.DueLeases(m.Clock()+1000))
			}
		}
	}
}

// A deleted vhost or user ends its connections on every node: the
// metadata log says so once for each (AccessSink), and not for a vhost
// or a user it does not have. A queue group applies a vhost's delete for
// its queues, and says nothing: the metadata log has said it.
func TestAccess_DeletesEndTheirConnections(t *testing.T) {
	vhostDelete := func(name string) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_VhostDelete{VhostDelete: &proto.VhostDelete{Name: name}}}
	}
	userDelete := func(name string) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_UserDelete{UserDelete: &proto.UserDelete{Name: name}}}
	}
	for _, tc := range []struct {
		name         string
		m            *fsm.Machine
		vhost, users []string
	}{
		{"metadata", fsmtest.New(t), []string{"v2"}, []string{"guest"}},
		{"queue group", queueGroup(t, 3), nil, nil},
	} {
		applyOK(t, tc.m, 3, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "v2"}}})
		_, rec := fsmtest.One(t, tc.m, 4, vhostDelete("v2"))
		_, again := fsmtest.One(t, tc.m, 5, vhostDelete("v2"))
		_, user := fsmtest.One(t, tc.m, 6, userDelete("guest"))
		_, none := fsmtest.One(t, tc.m, 7, userDelete("nobody"))
		if !slices.Equal(rec.VhostsDeleted, tc.vhost) || again.VhostsDeleted != nil || !slices.Equal(user.UsersDeleted, tc.users) ||
			none.UsersDeleted != nil || rec.UsersDeleted != nil || user.VhostsDeleted != nil {
			t.Errorf("%s: vhost %v then %v, user %v then %v, want %v and %v once each", tc.name,
				rec.VhostsDeleted, again.VhostsDeleted, user.UsersDeleted, none.UsersDeleted, tc.vhost, tc.users)
		}
	}
}
