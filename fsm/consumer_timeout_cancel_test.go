package fsm_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// timeouts renders both kinds of timeout effect in order of kind:
// channels closed ("c1/1:500") and consumers cancelled ("slow:500[1 3]").
func timeouts(rec *fsmtest.Recorder) string {
	s := []string{}
	if t := timedOut(rec); t != "" {
		s = append(s, t)
	}
	for _, c := range rec.ConsumersTimedOut {
		s = append(s, fmt.Sprintf("%s:%d%v", c.Consumer.GetTag(), c.Timeout, c.Tags))
	}
	return strings.Join(s, " ")
}

func consumerTags(m *fsm.Machine) []string {
	var out []string
	for _, c := range m.Consumers("/") {
		out = append(out, c.GetConsumer().GetTag())
	}
	slices.Sort(out)
	return out
}

// twoConsumers puts consumers "slow" (on q) and "fast" (on r) on one
// channel at the given level; slow gets a (tag 1, at 1000) and b (tag 3,
// at 1200), fast gets x (tag 2, at 1100). The timeout is 500 ms.
func twoConsumers(t *testing.T, level uint32) *fsm.Machine {
	t.Helper()
	m := fsmtest.NewAt(t, level)
	fsmtest.Apply(t, m, 1, declare("q", nil), declare("r", nil))
	fsmtest.Apply(t, m, 1, consume("q", "slow", ch1, 10), consume("r", "fast", ch1, 10))
	fsmtest.One(t, m, 1000, publish("", "q", "a", nil))
	fsmtest.One(t, m, 1100, publish("", "r", "x", nil))
	fsmtest.One(t, m, 1200, publish("", "q", "b", nil))
	return m
}

// From level 10, as RabbitMQ 4.3 does for a client with
// consumer_cancel_notify: the consumer whose delivery timed out is
// cancelled and all its deliveries (the younger one too) are returned,
// counted as a return and not a failed attempt; the channel and its other
// consumer go on, and that one's delivery keeps its own deadline.
func TestConsumerTimeout_CancelsOnlyTheConsumerFromLevel10(t *testing.T) {
	m := twoConsumers(t, 10)
	if _, rec := fsmtest.One(t, m, 1499, timeoutOf(ch1, 500)); timeouts(rec) != "" {
		t.Fatalf("timed out before the deadline: %q", timeouts(rec))
	}
	_, rec := fsmtest.One(t, m, 1500, timeoutOf(ch1, 500))
	if got := timeouts(rec); got != "slow:500[1 3]" {
		t.Fatalf("timeouts %q, want slow cancelled with tags 1 and 3 only", got)
	}
	if got := consumerTags(m); !slices.Equal(got, []string{"fast"}) {
		t.Fatalf("consumers %v, want fast only", got)
	}
	if got := m.Unacked(ch1, []uint64{1, 2, 3}); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("unacked on the channel %v, want fast's 2", got)
	}
	if ready(t, m, "q") != 2 || unackedOf(t, m, "q") != 0 || unackedOf(t, m, "r") != 1 {
		t.Fatalf("q ready %d unacked %d, r unacked %d", ready(t, m, "q"), unackedOf(t, m, "q"), unackedOf(t, m, "r"))
	}
	if at, ok := m.NextConsumerTimeout(500); !ok || at != 1600 {
		t.Fatalf("next timeout %d %v, want fast's at 1600", at, ok)
	}
	// The channel goes on: its other consumer is served and acks.
	_, rec = fsmtest.One(t, m, 1550, publish("", "r", "y", nil))
	if len(rec.Deliveries) != 1 || rec.Deliveries[0].Consumer.GetTag() != "fast" || rec.Deliveries[0].DeliveryTag != 4 {
		t.Fatalf("after the timeout the channel's other consumer got %v", rec.Deliveries)
	}
	if r, _ := fsmtest.One(t, m, 1560, settle(ch1, 2, false)); r.GetCode() != 0 {
		t.Fatalf("fast's ack refused: %v", r)
	}
	// The returned messages are redelivered in their order, with
	// x-acquired-count 1 and no x-delivery-count (RabbitMQ 4.3).
	_, rec = fsmtest.One(t, m, 1600, consume("q", "other", ch2, 10))
	if len(rec.Deliveries) != 2 {
		t.Fatalf("the next consumer got %d deliveries", len(rec.Deliveries))
	}
	for i, d := range rec.Deliveries {
		if string(d.Body) != []string{"a", "b"}[i] || !d.Redelivered ||
			header(t, d.Properties, "x-acquired-count") != 1 || header(t, d.Properties, "x-delivery-count") != 0 {
			t.Fatalf("redelivery %d: %q redelivered %v acquired %d delivery-count %d", i, d.Body, d.Redelivered,
				header(t, d.Properties, "x-acquired-count"), header(t, d.Properties, "x-delivery-count"))
		}
	}
	m = roundTrip(t, m)
	if got := consumerTags(m); !slices.Equal(got, []string{"fast", "other"}) {
		t.Fatalf("consumers after a snapshot %v", got)
	}
}

// Below level 10 the same log closes the whole channel, exactly as
// before: both consumers go and every delivery is requeued.
func TestConsumerTimeout_ClosesTheChannelBelowLevel10(t *testing.T) {
	m := twoConsumers(t, 9)
	_, rec := fsmtest.One(t, m, 1500, timeoutOf(ch1, 500))
	if got := timeouts(rec); got != "c1/1:500" {
		t.Fatalf("timeouts %q, want the channel closed", got)
	}
	if got := consumerTags(m); len(got) != 0 {
		t.Fatalf("consumers %v left after the close", got)
	}
	if ready(t, m, "q") != 2 || ready(t, m, "r") != 1 {
		t.Fatalf("ready q %d r %d, want everything back", ready(t, m, "q"), ready(t, m, "r"))
	}
}

// Consumers that are both overdue go in one entry, oldest first; a
// basic.get delivery, which no consumer answers for, still closes the
// channel, as in RabbitMQ 4.3; so does one of a consumer its client
// cancelled already.
func TestConsumerTimeout_BasicGetAndCancelledConsumerCloseTheChannel(t *testing.T) {
	m := twoConsumers(t, 10)
	if _, rec := fsmtest.One(t, m, 1700, timeoutOf(ch1, 500)); timeouts(rec) != "slow:500[1 3] fast:500[2]" {
		t.Fatalf("timeouts %q, want both consumers, oldest first", timeouts(rec))
	}
	if _, ok := m.NextConsumerTimeout(500); ok {
		t.Fatal("a timeout is still scheduled")
	}
	if got := consumerTags(m); len(got) != 0 {
		t.Fatalf("consumers %v", got)
	}

	m = fsmtest.New(t)
	fsmtest.Apply(t, m, 1, declare("q", nil), declare("r", nil))
	fsmtest.One(t, m, 1, consume("r", "c", ch1, 10))
	fsmtest.One(t, m, 1000, publish("", "q", "a", nil))
	fsmtest.One(t, m, 1000, getOn(ch1, "q"))
	if _, rec := fsmtest.One(t, m, 1500, timeoutOf(ch1, 500)); timeouts(rec) != "c1/1:500" {
		t.Fatalf("basic.get: timeouts %q, want the channel closed", timeouts(rec))
	}
	if got := consumerTags(m); len(got) != 0 {
		t.Fatalf("basic.get: consumers %v left", got)
	}

	m = fsmtest.New(t)
	fsmtest.Apply(t, m, 1, declare("q", nil), declare("r", nil))
	fsmtest.Apply(t, m, 1, consume("q", "c", ch1, 10), consume("r", "d", ch1, 10))
	fsmtest.One(t, m, 1000, publish("", "q", "a", nil))
	fsmtest.One(t, m, 1100, cancel("c", ch1))
	if _, rec := fsmtest.One(t, m, 1500, timeoutOf(ch1, 500)); timeouts(rec) != "c1/1:500" {
		t.Fatalf("cancelled consumer: timeouts %q, want the channel closed", timeouts(rec))
	}
}

// On a single-active-consumer queue the next consumer takes over and gets
// the returned messages first, in their order.
func TestConsumerTimeout_SingleActiveConsumerTakesOver(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1, declare("q", table("x-single-active-consumer", &proto.Value{Kind: &proto.Value_Bool{Bool: true}})))
	fsmtest.Apply(t, m, 1, consume("q", "a", ch1, 1), consume("q", "b", ch2, 1))
	fsmtest.Apply(t, m, 1000, publish("", "q", "1", nil), publish("", "q", "2", nil))
	_, rec := fsmtest.One(t, m, 1500, timeoutOf(ch1, 500))
	if timeouts(rec) != "a:500[1]" || len(rec.Deliveries) != 1 || rec.Deliveries[0].Consumer.GetTag() != "b" ||
		string(rec.Deliveries[0].Body) != "1" || !rec.Deliveries[0].Redelivered {
		t.Fatalf("timeouts %q, deliveries %v: b should get 1 back first", timeouts(rec), rec.Deliveries)
	}
}

// cancelLog is a log at level 9 raised to 10 half way, with consumer
// timeouts on both sides: before, the channel closes; after, one consumer
// of the channel goes and the other keeps receiving.
func cancelLog() [][]*proto.Command {
	return [][]*proto.Command{
		{{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
			{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{Name: "guest"}}}, fsmtest.SetProtocol(9)},
		{declare("q", table("x-consumer-timeout", i64(50))), declare("r", nil)},
		{consume("q", "c", ch1, 10), consume("r", "d", ch1, 10)},
		{publish("", "q", "a", nil), publish("", "r", "b", nil)},
		{timeoutOf(ch1, 10000)},
		{consume("q", "c", ch1, 10), consume("r", "d", ch1, 10)},
		{fsmtest.SetProtocol(10)},
		{publish("", "r", "x", nil), publish("", "q", "e", nil)},
		{timeoutOf(ch1, 10000)},
		{consume("q", "f", ch2, 10)},
		{publish("", "r", "z", nil), settle(ch1, 4, false)},
		{timeoutOf(ch2, 10000)},
	}
}

// A replica that replays the log from its start and one restored from a
// snapshot taken after any entry agree, after every entry, on the state
// and on the timeouts' effects, across the SetProtocol that raises the
// level to 10.
func TestConsumerTimeout_CancelReplayAndRestoreAcrossLevel10(t *testing.T) {
	effects := func(rec *fsmtest.Recorder) string {
		var ds []string
		for _, d := range rec.Deliveries {
			ds = append(ds, fmt.Sprintf("%s>%s#%d", d.Body, d.Consumer.GetTag(), d.DeliveryTag))
		}
		return timeouts(rec) + "|" + strings.Join(ds, ",")
	}
	// The current format (9) at every cut.
	replay := replayAndRestoreAgree(t, cancelLog(), effects, func(*fsm.Machine) []uint64 { return []uint64{9} })
	var all []string
	for _, s := range replay {
		if s != "|" {
			all = append(all, s)
		}
	}
	// Level 9: the channel closes (c and d go). Level 10: c goes with
	// its deliveries (a and e), d stays and gets z; f gets a and e back.
	want := "|a>c#1,b>d#2; c1/1:50|; |a>c#3,b>d#4; |x>d#5,e>c#6; c:50[3 6]|; |a>f#3,e>f#4; |z>d#7; f:50[3 4]|"
	if got := strings.Join(all, "; "); got != want {
		t.Fatalf("effects of the replay:\n%s\nwant\n%s", got, want)
	}
}
