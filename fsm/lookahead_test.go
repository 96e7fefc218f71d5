package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func consumeWithCredit(q, tag string, ch *proto.ChannelRef, prefetch, credit uint32) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: q, Prefetch: prefetch,
		Credit: credit, Consumer: &proto.ConsumerRef{Channel: ch, Tag: tag}}}}
}

// assignedOn counts the deliveries the log has assigned on ch and not yet
// settled: what the consumer's node holds, whether written to the client
// or kept as look-ahead (the counts shown take the latter as ready).
func assignedOn(m *fsm.Machine, ch *proto.ChannelRef) uint64 {
	tags := make([]uint64, 256)
	for i := range tags {
		tags[i] = uint64(i + 1)
	}
	return uint64(len(m.Unacked(ch, tags)))
}

// lookaheadRun: a consumer with prefetch 2 and credit 10 gets 3 messages
// at 100, and nothing is settled until 100+idle; 20 more are published
// then. It returns how many the consumer holds after that, and after an
// ack.
func lookaheadRun(t *testing.T, m *fsm.Machine, idle int64) (held, afterAck uint64) {
	t.Helper()
	fsmtest.One(t, m, 1, declare("q", nil))
	fsmtest.One(t, m, 1, consumeWithCredit("q", "c", ch1, 2, 10))
	fsmtest.Apply(t, m, 100, publish("", "q", "a", nil), publish("", "q", "b", nil), publish("", "q", "c", nil))
	if got := assignedOn(m, ch1); got != 3 {
		t.Fatalf("the consumer holds %d before the silence, want 3 (its prefetch and lookahead)", got)
	}
	var more []*proto.Command
	for range 20 {
		more = append(more, publish("", "q", "m", nil))
	}
	fsmtest.Apply(t, m, 100+idle, more...)
	held = assignedOn(m, ch1)
	fsmtest.One(t, m, 100+idle+1, settle(ch1, 1, false))
	return held, assignedOn(m, ch1)
}

// From level 7 a consumer whose channel has settled nothing for
// LookaheadIdleMs gets no more than its prefetch: a silent node strands
// little. Its next ack opens the lookahead again.
func TestLookahead_IdleConsumerFallsBackToItsPrefetch(t *testing.T) {
	held, after := lookaheadRun(t, fsmtest.New(t), fsm.LookaheadIdleMs)
	if held != 3 {
		t.Fatalf("an idle consumer holds %d, want the 3 it had (above its prefetch: nothing more)", held)
	}
	if after != 10 {
		t.Fatalf("after an ack it holds %d, want its credit (10)", after)
	}
	// Within the bound the lookahead counts.
	held, _ = lookaheadRun(t, fsmtest.New(t), fsm.LookaheadIdleMs-1)
	if held != 10 {
		t.Fatalf("a consumer active %d ms ago holds %d, want its credit (10)", fsm.LookaheadIdleMs-1, held)
	}
}

// Below level 7 the lookahead counts however long the consumer is silent:
// a replica replaying an old log assigns as its first replicas did.
func TestLookahead_BelowLevel7TheCreditAlwaysCounts(t *testing.T) {
	held, _ := lookaheadRun(t, fsmtest.NewAt(t, 5), fsm.LookaheadIdleMs)
	if held != 10 {
		t.Fatalf("at level 5 an idle consumer holds %d, want its credit (10)", held)
	}
}

// A replica that replays the log across the SetProtocol that reaches 7
// and one restored from a snapshot taken before it agree.
func TestLookahead_ReplayAcrossTheLevelAgrees(t *testing.T) {
	log := [][]*proto.Command{
		{declare("q", nil)},
		{consumeWithCredit("q", "c", ch1, 2, 10)},
		{publish("", "q", "a", nil), publish("", "q", "b", nil), publish("", "q", "c", nil)},
		{publish("", "q", "d", nil)},
		{fsmtest.SetProtocol(7)},
		{publish("", "q", "e", nil), publish("", "q", "f", nil)},
		{settle(ch1, 1, false)},
		{publish("", "q", "g", nil)},
	}
	stamps := []int64{1, 1, 100, 700, 800, 1400, 1401, 1402}
	run := func(from int) [32]byte {
		m := fsmtest.NewAt(t, 5)
		for i, cmds := range log {
			if i == from {
				m = roundTrip(t, m)
			}
			fsmtest.Apply(t, m, stamps[i], cmds...)
		}
		return m.Digest()
	}
	want := run(-1)
	for i := range log {
		if got := run(i); got != want {
			t.Fatalf("restored from a snapshot before entry %d: digest differs", i)
		}
	}
}
