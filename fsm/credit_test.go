package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func creditOf(ch *proto.ChannelRef, tag string, credit uint32) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Credit{Credit: &proto.Credit{
		Consumer: &proto.ConsumerRef{Channel: ch, Tag: tag}, Credit: credit}}}
}

// publishes is n publishes to q.
func publishes(q string, n int) []*proto.Command {
	var out []*proto.Command
	for range n {
		out = append(out, publish("", q, "m", nil))
	}
	return out
}

// creditRun: a consumer with prefetch 2 and credit 4 holds 4 of 20
// messages; a Credit of 12 follows, then one of 6 and an ack of six.
// It returns what the consumer holds after each.
func creditRun(t *testing.T, m *fsm.Machine) (raised, lowered, afterAcks uint64) {
	t.Helper()
	fsmtest.One(t, m, 1, declare("q", nil))
	fsmtest.One(t, m, 1, consumeWithCredit("q", "c", ch1, 2, 4))
	fsmtest.Apply(t, m, 2, publishes("q", 20)...)
	if got := assignedOn(m, ch1); got != 4 {
		t.Fatalf("the consumer holds %d before any Credit, want its credit 4", got)
	}
	fsmtest.One(t, m, 3, creditOf(ch1, "c", 12))
	raised = assignedOn(m, ch1)
	fsmtest.One(t, m, 4, creditOf(ch1, "c", 6))
	lowered = assignedOn(m, ch1)
	fsmtest.One(t, m, 5, settle(ch1, 6, true))
	return raised, lowered, assignedOn(m, ch1)
}

// From level 14 Credit sets the consumer's credit while it consumes: a
// raise assigns at once, a cut takes nothing back and holds further
// assignments until the consumer is below it.
func TestCredit_SetsTheCreditWhileConsuming(t *testing.T) {
	raised, lowered, after := creditRun(t, fsmtest.New(t))
	if raised != 12 {
		t.Fatalf("after a Credit of 12 the consumer holds %d, want 12", raised)
	}
	if lowered != 12 {
		t.Fatalf("a Credit of 6 left it %d, want the 12 it holds (nothing taken back)", lowered)
	}
	if after != 6 {
		t.Fatalf("after acking 6 of 12 it holds %d, want 6 (its new credit)", after)
	}
}

// Below level 14 a Credit changes nothing: the consumer keeps the credit
// of its Consume.
func TestCredit_BelowItsLevelChangesNothing(t *testing.T) {
	raised, lowered, after := creditRun(t, fsmtest.NewAt(t, 13))
	if raised != 4 || lowered != 4 || after != 4 {
		t.Fatalf("at level 13 the consumer holds %d, %d, %d, want its Consume's credit 4 each time", raised, lowered, after)
	}
}

// A Credit for a consumer that is gone, or one without acks or without
// a prefetch, changes nothing and is no error; one below the prefetch
// counts as the prefetch.
func TestCredit_OnlyForAConsumerWithPrefetchAndAcks(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1, declare("q", nil))
	fsmtest.One(t, m, 1, consumeWithCredit("q", "c", ch1, 2, 4))
	for _, c := range []*proto.Command{creditOf(ch1, "nobody", 50), creditOf(ch2, "c", 50), creditOf(ch1, "c", 1)} {
		if r, _ := fsmtest.One(t, m, 2, c); r.GetCode() != 0 {
			t.Fatalf("Credit refused: %d %s", r.GetCode(), r.GetText())
		}
	}
	fsmtest.Apply(t, m, 3, publishes("q", 5)...)
	if got := assignedOn(m, ch1); got != 2 {
		t.Fatalf("a Credit of 1 left the consumer %d, want its prefetch 2", got)
	}
	if l, ok := m.ConsumerLoad(&proto.ConsumerRef{Channel: ch1, Tag: "c"}); !ok || l.Credit != 2 || l.Unacked != 2 || l.Ready != 3 || l.Level != fsm.Protocol {
		t.Fatalf("ConsumerLoad = %+v, %v; want credit 2, 2 unacked, 3 ready, level %d", l, ok, fsm.Protocol)
	}
}

// The leader proposes Credit only once every server announces level 14,
// and refuses one above the log's bound.
func TestCredit_ProtocolAndBound(t *testing.T) {
	if got := fsm.CommandProtocol(creditOf(ch1, "c", 5)); got != 14 {
		t.Fatalf("Credit needs protocol %d, want 14", got)
	}
	if err := fsm.Validate(creditOf(ch1, "c", fsm.MaxCredit), fsm.Limits{}); err != nil {
		t.Fatalf("a credit of MaxCredit refused: %v", err)
	}
	if err := fsm.Validate(creditOf(ch1, "c", fsm.MaxCredit+1), fsm.Limits{}); err == nil {
		t.Fatal("a credit above MaxCredit accepted")
	}
	if err := fsm.Validate(&proto.Command{Cmd: &proto.Command_Credit{Credit: &proto.Credit{Credit: 5}}}, fsm.Limits{}); err == nil {
		t.Fatal("a Credit without a consumer accepted")
	}
}

// A replica that replays the log across the SetProtocol that reaches 14
// and one restored from a snapshot at any point agree: a Credit before
// the level is raised changes nothing on either.
func TestCredit_ReplayAcrossTheLevelAgrees(t *testing.T) {
	log := [][]*proto.Command{
		{declare("q", nil)},
		{consumeWithCredit("q", "c", ch1, 2, 4)},
		publishes("q", 10),
		{creditOf(ch1, "c", 8)},
		{fsmtest.SetProtocol(14)},
		{creditOf(ch1, "c", 8)},
		{settle(ch1, 3, true)},
		{creditOf(ch1, "c", 3)},
		publishes("q", 3),
	}
	if held := replicasAgree(t, 13, log); held != 7 {
		t.Fatalf("the consumer holds %d at the end, want 7 (8 after the Credit above the level, 3 acked, the last 2 of 10 assigned, then the cut to 3 assigns nothing)", held)
	}
}

// replicasAgree replays log on a machine at level below, and fails t
// unless a replica restored from a snapshot after any entry ends with the
// same digest. It returns what the consumer on ch1 holds at the end, so
// that the caller can check that the level's change took effect in the
// replay.
func replicasAgree(t *testing.T, below uint32, log [][]*proto.Command) (held uint64) {
	t.Helper()
	want, _ := replayLog(t, below, log, -1)
	for at := range log {
		if got, _ := replayLog(t, below, log, at); got.Digest() != want.Digest() {
			t.Fatalf("restored from a snapshot after entry %d: digest differs", at)
		}
	}
	return assignedOn(want, ch1)
}

func qosOf(ch *proto.ChannelRef, tag string, prefetch uint32) *proto.Command {
	c := creditOf(ch, tag, 0)
	c.GetCredit().Prefetch = &prefetch
	return c
}

// qosRun: a consumer with prefetch 1 holds 1 of 10 messages; its prefetch
// is raised to 3, cut to 2 (then two are acked), and lifted (0). It
// returns what the consumer holds after each.
func qosRun(t *testing.T, m *fsm.Machine) (raised, cut, lifted uint64) {
	t.Helper()
	fsmtest.One(t, m, 1, declare("q", nil))
	fsmtest.One(t, m, 1, consume("q", "c", ch1, 1))
	fsmtest.Apply(t, m, 2, publishes("q", 10)...)
	fsmtest.One(t, m, 3, qosOf(ch1, "c", 3))
	raised = assignedOn(m, ch1)
	fsmtest.One(t, m, 4, qosOf(ch1, "c", 2))
	fsmtest.One(t, m, 5, settle(ch1, 2, true))
	cut = assignedOn(m, ch1)
	fsmtest.One(t, m, 6, qosOf(ch1, "c", 0))
	return raised, cut, assignedOn(m, ch1)
}

// From level 25 a Credit's prefetch becomes the consumer's while it
// consumes: a raise assigns at once, a cut takes nothing back and holds
// assignments until the consumer is below it, 0 lifts the limit.
func TestQos_SetsThePrefetchWhileConsuming(t *testing.T) {
	raised, cut, lifted := qosRun(t, fsmtest.New(t))
	if raised != 3 {
		t.Fatalf("after a prefetch of 3 the consumer holds %d, want 3", raised)
	}
	if cut != 2 {
		t.Fatalf("cut to 2 with 3 held, then 2 acked, it holds %d, want 2", cut)
	}
	if lifted != 8 {
		t.Fatalf("with the prefetch lifted it holds %d, want the 8 left", lifted)
	}
}

// Below level 25 a Credit's prefetch is ignored (its credit still counts
// from level 14): the consumer keeps the prefetch of its Consume.
func TestQos_BelowItsLevelOnlyTheCreditCounts(t *testing.T) {
	raised, cut, lifted := qosRun(t, fsmtest.NewAt(t, 24))
	if raised != 1 || cut != 1 || lifted != 1 {
		t.Fatalf("at level 24 the consumer holds %d, %d, %d, want its Consume's prefetch 1 each time", raised, cut, lifted)
	}
}

// A prefetch for a consumer without acks limits nothing; the leader
// proposes one only once every server announces level 25, and refuses
// one above AMQP's short.
func TestQos_ProtocolAndBound(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1, declare("q", nil))
	noAck := consume("q", "c", ch1, 0)
	noAck.GetConsume().NoAck = true
	fsmtest.One(t, m, 1, noAck)
	if r, _ := fsmtest.One(t, m, 2, qosOf(ch1, "c", 5)); r.GetCode() != 0 {
		t.Fatalf("a prefetch for a no-ack consumer refused: %d %s", r.GetCode(), r.GetText())
	}
	fsmtest.Apply(t, m, 3, publishes("q", 8)...)
	if got := m.Stats().Delivered; got != 8 {
		t.Fatalf("the no-ack consumer was given %d of 8 after a prefetch of 5, want all", got)
	}
	if got := fsm.CommandProtocol(qosOf(ch1, "c", 5)); got != 25 {
		t.Fatalf("a Credit with a prefetch needs protocol %d, want 25", got)
	}
	if err := fsm.Validate(qosOf(ch1, "c", 65535), fsm.Limits{}); err != nil {
		t.Fatalf("a prefetch of 65535 refused: %v", err)
	}
	if err := fsm.Validate(qosOf(ch1, "c", 65536), fsm.Limits{}); err == nil {
		t.Fatal("a prefetch above 65535 accepted")
	}
}

// A replica that replays the log across the SetProtocol that reaches 25
// and one restored from a snapshot at any point agree.
func TestQos_ReplayAcrossTheLevelAgrees(t *testing.T) {
	log := [][]*proto.Command{
		{declare("q", nil)},
		{consume("q", "c", ch1, 1)},
		publishes("q", 10),
		{qosOf(ch1, "c", 4)},
		{fsmtest.SetProtocol(25)},
		{qosOf(ch1, "c", 4)},
		{settle(ch1, 2, true)},
		{qosOf(ch1, "c", 2)},
		publishes("q", 3),
	}
	if held := replicasAgree(t, 24, log); held != 4 {
		t.Fatalf("the consumer holds %d at the end, want 4 (1 until the level, then 4, 2 acked and refilled, then the cut to 2 takes nothing back)", held)
	}
}
