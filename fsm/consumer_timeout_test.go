package fsm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

var ch3 = &proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 3}

func timeoutOf(ch *proto.ChannelRef, def int64) *proto.Command {
	return fsmtest.ConsumerTimeout(ch, def)
}

func getOn(ch *proto.ChannelRef, q string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{Vhost: "/", Queue: q, Channel: ch}}}
}

func timedOut(rec *fsmtest.Recorder) string {
	var s []string
	for _, t := range rec.TimedOut {
		s = append(s, fmt.Sprintf("%s/%d:%d", t.Channel.GetConnection(), t.Channel.GetChannel(), t.Timeout))
	}
	return strings.Join(s, " ")
}

func unackedOf(t *testing.T, m *fsm.Machine, q string) uint64 {
	t.Helper()
	qi, ok := m.Queue("/", q)
	if !ok {
		t.Fatalf("queue %q missing", q)
	}
	return qi.GetUnacked()
}

// A delivery times out when the log clock reaches its assignment plus the
// timeout, not a millisecond before: the command proposed early changes
// nothing; at the deadline (below level 10) the channel's consumers go,
// its deliveries are requeued (redelivered), and the node is told to
// close the channel.
func TestConsumerTimeout_FiresAtTheDeadlineOnLogTime(t *testing.T) {
	m := fsmtest.NewAt(t, 9)
	fsmtest.One(t, m, 1, declare("q", nil))
	fsmtest.One(t, m, 1, consume("q", "c", ch1, 10))
	fsmtest.One(t, m, 1000, publish("", "q", "x", nil))
	if at, ok := m.NextConsumerTimeout(500); !ok || at != 1500 {
		t.Fatalf("next timeout %d %v, want 1500", at, ok)
	}
	if due := m.DueConsumerTimeouts(1499, 500); len(due) != 0 {
		t.Fatalf("due at 1499: %v", due)
	}
	if due := m.DueConsumerTimeouts(1500, 500); len(due) != 1 || due[0].GetChannel() != 1 {
		t.Fatalf("due at 1500: %v", due)
	}
	if _, rec := fsmtest.One(t, m, 1499, timeoutOf(ch1, 500)); len(rec.TimedOut) != 0 || unackedOf(t, m, "q") != 1 {
		t.Fatalf("a command before the deadline timed out %q, unacked %d", timedOut(rec), unackedOf(t, m, "q"))
	}
	_, rec := fsmtest.One(t, m, 1500, timeoutOf(ch1, 500))
	if got := timedOut(rec); got != "c1/1:500" {
		t.Fatalf("timed out %q", got)
	}
	if ready(t, m, "q") != 1 || unackedOf(t, m, "q") != 0 || len(m.Consumers("/")) != 0 {
		t.Fatalf("ready %d unacked %d consumers %d", ready(t, m, "q"), unackedOf(t, m, "q"), len(m.Consumers("/")))
	}
	if _, ok := m.NextConsumerTimeout(500); ok {
		t.Fatal("a timeout is still scheduled")
	}
	_, rec = fsmtest.One(t, m, 1600, consume("q", "d", ch2, 10))
	if len(rec.Deliveries) != 1 || !rec.Deliveries[0].Redelivered || string(rec.Deliveries[0].Body) != "x" {
		t.Fatalf("the other consumer got %v", rec.Deliveries)
	}
	// A repeated command (a second leader's) finds nothing to do.
	if _, rec := fsmtest.One(t, m, 5000, timeoutOf(ch1, 500)); len(rec.TimedOut) != 0 {
		t.Fatalf("a stale command timed out %q", timedOut(rec))
	}
}

// Like RabbitMQ, only the channel's oldest delivery counts: an ack of it
// moves the deadline to the next one's, and a default of 0 means none
// (level 9: the channel closes).
func TestConsumerTimeout_OldestDeliveryAndNoDefault(t *testing.T) {
	m := fsmtest.NewAt(t, 9)
	fsmtest.One(t, m, 1, declare("q", nil))
	fsmtest.One(t, m, 1, consume("q", "c", ch1, 10))
	fsmtest.One(t, m, 100, publish("", "q", "a", nil))
	fsmtest.One(t, m, 300, publish("", "q", "b", nil))
	if at, _ := m.NextConsumerTimeout(1000); at != 1100 {
		t.Fatalf("next %d, want 1100", at)
	}
	fsmtest.One(t, m, 400, settle(ch1, 1, false))
	if at, _ := m.NextConsumerTimeout(1000); at != 1300 {
		t.Fatalf("next %d after the ack, want 1300", at)
	}
	if _, ok := m.NextConsumerTimeout(0); ok {
		t.Fatal("a default of 0 still times out")
	}
	if _, rec := fsmtest.One(t, m, 9999, timeoutOf(ch1, 0)); len(rec.TimedOut) != 0 {
		t.Fatalf("timed out %q without a timeout", timedOut(rec))
	}
	if _, rec := fsmtest.One(t, m, 9999, timeoutOf(ch1, 1000)); timedOut(rec) != "c1/1:1000" {
		t.Fatalf("timed out %q", timedOut(rec))
	}
}

// The queue's x-consumer-timeout and its policy's consumer-timeout
// override the node's default; with both, the smaller applies (RabbitMQ
// 3.12). basic.get deliveries time out as well.
func TestConsumerTimeout_QueueArgumentAndPolicyOverrideTheDefault(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1, declare("arg", table("x-consumer-timeout", i64(100))),
		declare("pol", nil), declare("both", table("x-consumer-timeout", i64(300))), declare("none", nil),
		declare("argbig", table("x-consumer-timeout", i64(900))))
	if r, _ := fsmtest.One(t, m, 1, policySet("p", "^(pol|both|argbig)$", 0, false, &proto.PolicyDefinition{ConsumerTimeout: ptr(int64(200))})); r.GetCode() != 0 {
		t.Fatalf("policy refused: %v", r)
	}
	chans := map[string]*proto.ChannelRef{}
	for i, q := range []string{"arg", "pol", "both", "none", "argbig"} {
		fsmtest.One(t, m, 1000, publish("", q, q, nil))
		chans[q] = &proto.ChannelRef{Node: "n1", Connection: "c" + q, Channel: uint32(i + 1)}
		if r, _ := fsmtest.One(t, m, 1000, getOn(chans[q], q)); r.GetGet() == nil {
			t.Fatalf("get %s: %v", q, r)
		}
	}
	due := func(now, def int64) string {
		var s []string
		for _, c := range m.DueConsumerTimeouts(now, def) {
			s = append(s, strings.TrimPrefix(c.GetConnection(), "c"))
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		now, def int64
		want     string
	}{
		{1099, 0, ""},
		{1100, 0, "arg"},
		{1200, 0, "arg argbig both pol"},
		{1200, 150, "arg argbig both none pol"},
		{1200, 5000, "arg argbig both pol"},
	} {
		if got := due(tc.now, tc.def); got != tc.want {
			t.Errorf("due at %d with default %d: %q, want %q", tc.now, tc.def, got, tc.want)
		}
	}
	if at, _ := m.NextConsumerTimeout(0); at != 1100 {
		t.Fatalf("next %d, want 1100", at)
	}
	_, rec := fsmtest.Apply(t, m, 1200, timeoutOf(chans["both"], 5000), timeoutOf(chans["none"], 5000))
	if got := timedOut(rec); got != "cboth/3:200" {
		t.Fatalf("timed out %q, want the policy's 200 ms for both and nothing for none", got)
	}
	if ready(t, m, "both") != 1 || unackedOf(t, m, "none") != 1 {
		t.Fatalf("both ready %d, none unacked %d", ready(t, m, "both"), unackedOf(t, m, "none"))
	}
}

// From level 4 an invalid x-consumer-timeout or consumer-timeout is
// refused as RabbitMQ refuses it; a queue declared before keeps its
// argument, which then counts for nothing.
func TestConsumerTimeout_InvalidValues(t *testing.T) {
	m := fsmtest.New(t)
	for _, tc := range []struct {
		v    *proto.Value
		want string
	}{
		{i64(-1), "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for queue 'q' in vhost '/': {value_negative,-1}"},
		{str("60000"), "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for queue 'q' in vhost '/': \"expected integer, got longstr\""},
	} {
		r, _ := fsmtest.One(t, m, 1, declare("q", table("x-consumer-timeout", tc.v)))
		if r.GetCode() != 406 || r.GetText() != tc.want {
			t.Errorf("declare with %v: %d %q", tc.v, r.GetCode(), r.GetText())
		}
	}
	if r, _ := fsmtest.One(t, m, 1, policySet("p", ".*", 0, false, &proto.PolicyDefinition{ConsumerTimeout: ptr(int64(-5))})); r.GetCode() != 406 {
		t.Fatalf("negative consumer-timeout policy: %v", r)
	}

	old := fsmtest.NewAt(t, 3)
	if r, _ := fsmtest.One(t, old, 1, declare("q", table("x-consumer-timeout", i64(-1)))); r.GetCode() != 0 {
		t.Fatalf("level 3 refused what it knew nothing of: %v", r)
	}
	fsmtest.One(t, old, 2, fsmtest.SetProtocol(4))
	fsmtest.One(t, old, 3, publish("", "q", "x", nil))
	fsmtest.One(t, old, 3, getOn(ch1, "q"))
	if at, ok := old.NextConsumerTimeout(1000); !ok || at != 1003 {
		t.Fatalf("next %d %v: the invalid argument must leave the default", at, ok)
	}
}

// Below level 4 nothing is timed out and deliveries carry no time; the
// SetProtocol that raises the level starts the timeout of what is unacked
// then, at its own stamp.
func TestConsumerTimeout_FollowsTheLevel(t *testing.T) {
	m := fsmtest.NewAt(t, 3)
	fsmtest.One(t, m, 1, declare("q", table("x-consumer-timeout", i64(100))))
	fsmtest.One(t, m, 1, consume("q", "c", ch1, 10))
	fsmtest.One(t, m, 10, publish("", "q", "x", nil))
	if _, ok := m.NextConsumerTimeout(100); ok {
		t.Fatal("a timeout is scheduled at level 3")
	}
	if _, rec := fsmtest.One(t, m, 5000, timeoutOf(ch1, 100)); len(rec.TimedOut) != 0 || unackedOf(t, m, "q") != 1 {
		t.Fatalf("level 3 applied a consumer timeout: %q", timedOut(rec))
	}
	fsmtest.One(t, m, 6000, fsmtest.SetProtocol(4))
	if at, ok := m.NextConsumerTimeout(0); !ok || at != 6100 {
		t.Fatalf("next %d %v, want 6100: the delivery's timeout starts with the level", at, ok)
	}
	if _, rec := fsmtest.One(t, m, 6100, timeoutOf(ch1, 0)); timedOut(rec) != "c1/1:100" {
		t.Fatalf("timed out %q", timedOut(rec))
	}
}

// A delivery the node held beyond the prefetch (lookahead) reached the
// client no earlier than the channel's latest ack: its timeout counts
// from there, not from its assignment.
func TestConsumerTimeout_HeldDeliveriesCountFromTheLatestAck(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1, declare("q", nil))
	fsmtest.One(t, m, 1, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: "q",
		Prefetch: 1, Credit: 10, Consumer: &proto.ConsumerRef{Channel: ch1, Tag: "c"}}}})
	fsmtest.Apply(t, m, 100, publish("", "q", "a", nil), publish("", "q", "b", nil))
	if at, _ := m.NextConsumerTimeout(500); at != 600 {
		t.Fatalf("next %d, want 600", at)
	}
	fsmtest.One(t, m, 400, settle(ch1, 1, false))
	if at, _ := m.NextConsumerTimeout(500); at != 900 {
		t.Fatalf("next %d after the ack, want 900: the held delivery was written then", at)
	}
	m = roundTrip(t, m)
	if at, _ := m.NextConsumerTimeout(500); at != 900 {
		t.Fatalf("next %d after a snapshot, want 900", at)
	}
}

// timeoutLog is a log begun at level 3 whose level is raised half way,
// with consumer timeouts proposed before (no-ops) and after it.
func timeoutLog() [][]*proto.Command {
	return [][]*proto.Command{
		{{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
			{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{Name: "guest"}}}, fsmtest.SetProtocol(3)},
		{declare("q", table("x-consumer-timeout", i64(50))), declare("r", nil)},
		{consume("q", "c", ch1, 10), consume("r", "d", ch2, 1)},
		{publish("", "q", "a", nil), publish("", "r", "b", nil), publish("", "r", "c", nil)},
		{timeoutOf(ch1, 100)},
		{fsmtest.SetProtocol(4)},
		{publish("", "q", "d", nil), getOn(ch3, "r")},
		{settle(ch2, 1, false)},
		{timeoutOf(ch2, 100)},
		{timeoutOf(ch1, 100), timeoutOf(ch3, 100)},
		{consume("q", "e", ch2, 10)},
		{timeoutOf(ch2, 10)},
	}
}

// A replica that replays the log from its start and one restored from a
// snapshot taken after any entry (in the current format, and before the
// level is raised in format 5 too) agree on the state after every entry
// and on which channels time out.
func TestConsumerTimeout_ReplayAndRestoreAgree(t *testing.T) {
	replay := replayAndRestoreAgree(t, timeoutLog(), timedOut, func(head *fsm.Machine) []uint64 {
		if head.ProtocolLevel() < 4 {
			return []uint64{6, 5}
		}
		return []uint64{6}
	})
	var all []string
	for _, s := range replay {
		if s != "" {
			all = append(all, s)
		}
	}
	if got := strings.Join(all, ","); got != "c1/1:50 c1/3:100,c2/1:10" {
		t.Fatalf("timeouts of the replay: %q", got)
	}
}

// replayAndRestoreAgree applies entries (one entry per element, stamped
// 100, 200, ...) from the start, and for every cut restores a snapshot
// taken after it, in each format formats names for the machine at the
// cut, and applies the rest: after every entry both must show the same
// effects and digest. It returns the replay's effects per entry.
func replayAndRestoreAgree(t *testing.T, entries [][]*proto.Command, effects func(*fsmtest.Recorder) string,
	formats func(head *fsm.Machine) []uint64) []string {
	t.Helper()
	type step struct {
		effects string
		digest  [32]byte
	}
	stamp := func(i int) int64 { return int64(100 * (i + 1)) }
	run := func(m *fsm.Machine, from int) []step {
		var out []step
		for i, cmds := range entries[from:] {
			_, rec := fsmtest.Apply(t, m, stamp(from+i), cmds...)
			out = append(out, step{effects(rec), m.Digest()})
		}
		return out
	}
	replay := run(fsm.New(), 0)
	for cut := 1; cut < len(entries); cut++ {
		head := fsm.New()
		for i, cmds := range entries[:cut] {
			fsmtest.Apply(t, head, stamp(i), cmds...)
		}
		for _, f := range formats(head) {
			b, err := fsm.SnapshotAs(head, f, head.ProtocolLevel())
			if err != nil {
				t.Fatal(err)
			}
			got := run(restoreBytes(t, b), cut)
			for i := range got {
				if want := replay[cut+i]; got[i] != want {
					t.Fatalf("snapshot after entry %d (format %d), entry %d: effects %q, replay %q; same digest %v",
						cut, f, cut+i+1, got[i].effects, want.effects, got[i].digest == want.digest)
				}
			}
		}
	}
	out := make([]string, len(replay))
	for i, s := range replay {
		out[i] = s.effects
	}
	return out
}

func TestValidate_ConsumerTimeout(t *testing.T) {
	for _, tc := range []struct {
		c    *proto.Command
		code uint32
	}{
		{timeoutOf(ch1, 0), 0},
		{timeoutOf(ch1, -1), 541},
		{timeoutOf(nil, 10), 541},
		{timeoutOf(&proto.ChannelRef{Node: "n1", Channel: 1}, 10), 541},
	} {
		err := fsm.Validate(tc.c, fsm.Limits{})
		if tc.code == 0 {
			if err != nil {
				t.Errorf("%v: %v", tc.c, err)
			}
			continue
		}
		if e := invalid(t, err); e.Code != tc.code {
			t.Errorf("%v: code %d", tc.c, e.Code)
		}
	}
	if p := fsm.CommandProtocol(timeoutOf(ch1, 1)); p != 4 {
		t.Fatalf("protocol of ConsumerTimeout %d, want 4", p)
	}
}
