package cluster

import (
	"fmt"

	"github.com/hashicorp/raft"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// tagSink records the tags of the deliveries handed to it, and the
// consumers cancelled and timed out.
type tagSink struct {
	fsm.DiscardSink
	tags      []uint64
	cancelled []string
	timedOut  []string // consumer tags, and channels as "ch<n>"
}

func (s *tagSink) ConsumerTimedOut(c *proto.ConsumerRef, timeout int64, tags []uint64) {
	s.timedOut = append(s.timedOut, fmt.Sprintf("%s/%d/%v", c.GetTag(), timeout, tags))
}

func (s *tagSink) ChannelTimedOut(ch *proto.ChannelRef, timeout int64) {
	s.timedOut = append(s.timedOut, fmt.Sprintf("ch%d/%d", ch.GetChannel(), timeout))
}

func (s *tagSink) ConsumerCancelled(c *proto.ConsumerRef) {
	s.cancelled = append(s.cancelled, c.GetTag())
}

func (s *tagSink) Deliver(d *fsm.Delivery) { s.tags = append(s.tags, d.DeliveryTag) }

// A follower hands its channel each delivery once: a sync after a break
// brings the channel's unsettled deliveries, of which only those past the
// last it handed are new; a channel the log no longer holds, or one this
// node closed, numbers its deliveries from 1 again.
func TestEffectsFollower_ASyncHandsOnlyWhatTheChannelMissed(t *testing.T) {
	ch := &proto.ChannelRef{Node: "x", Connection: "c", Channel: 1}
	del := func(tag uint64) *proto.RemoteDelivery {
		return &proto.RemoteDelivery{Consumer: &proto.ConsumerRef{Channel: ch, Tag: "t"}, DeliveryTag: tag, Body: []byte("b")}
	}
	live := func(tags ...uint64) []*proto.Effect {
		var es []*proto.Effect
		for _, tag := range tags {
			es = append(es, &proto.Effect{Kind: &proto.Effect_Deliver{Deliver: del(tag)}})
		}
		return es
	}
	syncOf := func(tags ...uint64) *proto.EffectsSync {
		sc := &proto.SyncChannel{Channel: ch}
		for _, tag := range tags {
			sc.Deliveries = append(sc.Deliveries, del(tag))
		}
		return &proto.EffectsSync{Channels: []*proto.SyncChannel{sc}}
	}
	f := &effectsFollower{last: map[string]uint64{}, consumers: map[string]consumerAt{}}
	s := &tagSink{}
	f.sync(s, &proto.EffectsSync{})
	f.hand(s, live(1, 2, 3))
	// 1 was settled; 4 and 5 were assigned while the stream was down.
	f.sync(s, syncOf(2, 3, 4, 5))
	if want := []uint64{1, 2, 3, 4, 5}; !slices.Equal(s.tags, want) {
		t.Fatalf("handed %v, want %v", s.tags, want)
	}
	// The channel closed and opened again in the log meanwhile: gone
	// from the sync, then numbered from 1.
	f.sync(s, &proto.EffectsSync{})
	f.sync(s, syncOf(1))
	if want := []uint64{1, 2, 3, 4, 5, 1}; !slices.Equal(s.tags, want) {
		t.Fatalf("after the channel came back: handed %v, want %v", s.tags, want)
	}
	// This node closes it, opens it again, and the stream breaks before
	// the new channel's first delivery came.
	f.committed([]*proto.Command{{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch}}}}, nil)
	f.sync(s, syncOf(1))
	if want := []uint64{1, 2, 3, 4, 5, 1, 1}; !slices.Equal(s.tags, want) {
		t.Fatalf("after this node closed the channel: handed %v, want %v", s.tags, want)
	}
}

// A stream from a member that was behind the one before it (it had not
// applied as far when it sent its sync) sends again deliveries the node
// handed already: they are not handed twice, whether the member's sync
// held the channel or did not yet (its consumer committed after the
// sync's index).
func TestEffectsFollower_AMemberBehindSendsNothingTwice(t *testing.T) {
	ch := &proto.ChannelRef{Node: "x", Connection: "c", Channel: 1}
	del := func(tag uint64) *proto.Effect {
		return &proto.Effect{Kind: &proto.Effect_Deliver{Deliver: &proto.RemoteDelivery{Consumer: &proto.ConsumerRef{Channel: ch, Tag: "t"}, DeliveryTag: tag}}}
	}
	f := &effectsFollower{last: map[string]uint64{}, consumers: map[string]consumerAt{}}
	s := &tagSink{}
	f.committed([]*proto.Command{{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Queue: "q", Consumer: &proto.ConsumerRef{Channel: ch, Tag: "t"}}}}},
		[]*proto.Result{{Index: 10}})
	f.sync(s, &proto.EffectsSync{Index: 10, Channels: []*proto.SyncChannel{{Channel: ch, Consumers: []*proto.ConsumerRef{{Channel: ch, Tag: "t"}}}}})
	f.hand(s, []*proto.Effect{del(1), del(2), del(3)})
	// The member dies; the next had applied deliveries 1 and 2 only.
	f.sync(s, &proto.EffectsSync{Index: 12, Channels: []*proto.SyncChannel{{Channel: ch,
		Consumers:  []*proto.ConsumerRef{{Channel: ch, Tag: "t"}},
		Deliveries: []*proto.RemoteDelivery{{Consumer: &proto.ConsumerRef{Channel: ch, Tag: "t"}, DeliveryTag: 2}}}}})
	f.hand(s, []*proto.Effect{del(3), del(4)})
	// That one dies too; the next had not even applied the consume.
	f.sync(s, &proto.EffectsSync{Index: 9})
	f.hand(s, []*proto.Effect{del(1), del(2), del(3), del(4), del(5)})
	if want := []uint64{1, 2, 3, 4, 5}; !slices.Equal(s.tags, want) {
		t.Fatalf("handed %v, want %v: each once", s.tags, want)
	}
}

// A consumer of this node cancelled in the group while the stream was
// down (its queue deleted) is missing from the next sync: its client is
// told, once. One whose consume committed after the sync's state was
// taken is not missing, only not there yet.
func TestEffectsFollower_AConsumerGoneFromTheSyncIsCancelled(t *testing.T) {
	ch := &proto.ChannelRef{Node: "x", Connection: "c", Channel: 1}
	consume := func(tag string) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Queue: "q", Consumer: &proto.ConsumerRef{Channel: ch, Tag: tag}}}}
	}
	f := &effectsFollower{last: map[string]uint64{}, consumers: map[string]consumerAt{}}
	s := &tagSink{}
	f.committed([]*proto.Command{consume("old"), consume("late")}, []*proto.Result{{Index: 5}, {Index: 9}})
	f.committed([]*proto.Command{consume("kept")}, []*proto.Result{{Index: 6}})
	sync := &proto.EffectsSync{Index: 7, Channels: []*proto.SyncChannel{{Channel: ch,
		Consumers: []*proto.ConsumerRef{{Channel: ch, Tag: "kept"}}}}}
	f.sync(s, sync)
	if !slices.Equal(s.cancelled, []string{"old"}) {
		t.Fatalf("cancelled %v, want old alone (late committed after the sync's index 7)", s.cancelled)
	}
	f.sync(s, sync)
	if len(s.cancelled) != 1 {
		t.Fatalf("cancelled again: %v", s.cancelled)
	}
	// Cancelled by its client: not the log's to cancel.
	f.committed([]*proto.Command{{Cmd: &proto.Command_Cancel{Cancel: &proto.Cancel{Consumer: &proto.ConsumerRef{Channel: ch, Tag: "kept"}}}}}, nil)
	f.sync(s, &proto.EffectsSync{Index: 10, Channels: []*proto.SyncChannel{{Channel: ch,
		Consumers: []*proto.ConsumerRef{{Channel: ch, Tag: "late"}}}}})
	if len(s.cancelled) != 1 {
		t.Fatalf("a consumer its client cancelled, or one still there, was cancelled: %v", s.cancelled)
	}
}

// A consumer of this node timed out in the group while the stream was
// down is told as a timeout, not as a cancel: the sync brings the
// member's last timeouts with their indexes. A timeout is told once, and
// only to consumers that committed before it (not to a channel opened
// again under its key); a consumer gone for another reason is cancelled.
func TestEffectsFollower_ATimeoutMissedWhileDownIsToldAsATimeout(t *testing.T) {
	ref := func(ch uint32, tag string) *proto.ConsumerRef {
		return &proto.ConsumerRef{Channel: &proto.ChannelRef{Node: "x", Connection: "c", Channel: ch}, Tag: tag}
	}
	consume := func(c *proto.ConsumerRef) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Queue: "q", Consumer: c}}}
	}
	consumerTimeout := func(index uint64, c *proto.ConsumerRef, tags ...uint64) *proto.SyncTimeout {
		return &proto.SyncTimeout{Index: index, Effect: &proto.Effect{Kind: &proto.Effect_ConsumerTimedOut{
			ConsumerTimedOut: &proto.ConsumerTimeoutEffect{Consumer: c, Timeout: 30000, Tags: tags}}}}
	}
	channelTimeout := func(index uint64, c *proto.ConsumerRef) *proto.SyncTimeout {
		return &proto.SyncTimeout{Index: index, Effect: &proto.Effect{Kind: &proto.Effect_ChannelTimedOut{
			ChannelTimedOut: &proto.ChannelTimeoutEffect{Channel: c.GetChannel(), Timeout: 1000}}}}
	}
	f := &effectsFollower{last: map[string]uint64{}, consumers: map[string]consumerAt{}}
	s := &tagSink{}
	a, b, gone, again := ref(1, "a"), ref(2, "b"), ref(3, "gone"), ref(4, "again")
	f.committed([]*proto.Command{consume(a), consume(b), consume(gone)}, []*proto.Result{{Index: 5}, {Index: 6}, {Index: 7}})
	f.committed([]*proto.Command{consume(again)}, []*proto.Result{{Index: 12}})
	// While the stream was down: a timed out at 8 (two deliveries
	// requeued), b's channel at 9, gone's queue deleted; again's channel
	// timed out at 10, then opened again under its key and consumed at
	// 12, and that consumer's queue deleted since.
	sync := &proto.EffectsSync{Index: 20, Timeouts: []*proto.SyncTimeout{
		consumerTimeout(8, a, 3, 4), channelTimeout(9, b), channelTimeout(10, again)}}
	f.sync(s, sync)
	if want := []string{"a/30000/[3 4]", "ch2/1000"}; !slices.Equal(s.timedOut, want) {
		t.Fatalf("timed out %v, want %v", s.timedOut, want)
	}
	if want := []string{"again", "gone"}; !slices.Equal(slices.Sorted(slices.Values(s.cancelled)), want) {
		t.Fatalf("cancelled %v, want %v", s.cancelled, want)
	}
	f.sync(s, sync)
	if len(s.timedOut) != 2 || len(s.cancelled) != 2 {
		t.Fatalf("told again: timed out %v, cancelled %v", s.timedOut, s.cancelled)
	}
}

// A node's keepalive ask is held to the bounds: none stays none, too
// small gets the least, too large the most.
func TestEffectsKeepalive_WithinTheBounds(t *testing.T) {
	for _, tc := range []struct {
		ms   uint32
		want time.Duration
	}{
		{0, 0},
		{1, minEffectsKeepalive},
		{uint32(minEffectsKeepalive.Milliseconds()), minEffectsKeepalive},
		{60, 60 * time.Millisecond},
		{uint32(maxEffectsKeepalive.Milliseconds()), maxEffectsKeepalive},
		{uint32(maxEffectsKeepalive.Milliseconds()) + 1, maxEffectsKeepalive},
		{math.MaxUint32, maxEffectsKeepalive},
	} {
		if got := effectsKeepalive(tc.ms); got != tc.want {
			t.Errorf("effectsKeepalive(%d) = %v, want %v", tc.ms, got, tc.want)
		}
	}
}

// Only a wait for the next message counts as a stream's silence, and
// only past the limit the member's keepalive allows; without a limit
// (a member that promised none) no wait is too long.
func TestStreamSilence_CountsWaitsPastTheLimit(t *testing.T) {
	s := newStreamSilence()
	t0 := s.base
	if _, over := s.over(t0.Add(time.Hour)); over {
		t.Fatal("silent with no limit and no wait")
	}
	s.waiting(t0)
	if _, over := s.over(t0.Add(time.Hour)); over {
		t.Fatal("silent with no limit")
	}
	s.limit.Store(int64(300 * time.Millisecond))
	if d, over := s.over(t0.Add(300 * time.Millisecond)); over || d != 300*time.Millisecond {
		t.Fatalf("at the limit: %v, over %v; want 300ms, not over", d, over)
	}
	if _, over := s.over(t0.Add(301 * time.Millisecond)); !over {
		t.Fatal("not silent past the limit")
	}
	s.waiting(time.Time{}) // handing on what came: not a wait
	if _, over := s.over(t0.Add(time.Hour)); over {
		t.Fatal("silent while not waiting")
	}
	s.waiting(t0.Add(time.Hour))
	if _, over := s.over(t0.Add(time.Hour + 100*time.Millisecond)); over {
		t.Fatal("a new wait counted from an old one")
	}
}

// The wait for a stream's sync, begun before the stream opened, goes on
// through the first receive: it is not restarted there.
func TestStreamSilence_TheWaitForTheSyncGoesOnThroughTheFirstReceive(t *testing.T) {
	s := newStreamSilence()
	t0 := s.base
	s.limit.Store(int64(300 * time.Millisecond))
	s.waiting(t0)
	s.goesOn(t0.Add(200 * time.Millisecond))
	if d, over := s.over(t0.Add(301 * time.Millisecond)); !over || d != 301*time.Millisecond {
		t.Fatalf("301ms after the stream opened: %v, over %v; want 301ms, over", d, over)
	}
	s.waiting(time.Time{})
	s.goesOn(t0.Add(time.Second))
	if d, _ := s.over(t0.Add(time.Second + 100*time.Millisecond)); d != 100*time.Millisecond {
		t.Fatalf("a wait begun after the last one ended: %v, want 100ms", d)
	}
}

// A sync is waited for as long as any message, and with a fence as long
// as the Tick the member waits for on top.
func TestEffectsSyncLimit(t *testing.T) {
	if got := effectsSyncLimit(500*time.Millisecond, 100*time.Millisecond, false); got != 500*time.Millisecond {
		t.Errorf("limit %v, want the heartbeat timeout 500ms", got)
	}
	if got, want := effectsSyncLimit(500*time.Millisecond, 100*time.Millisecond, true), 500*time.Millisecond+groupGetsWait; got != want {
		t.Errorf("fenced: limit %v, want %v", got, want)
	}
}

// The silence limit is raft's heartbeat timeout, and never under four
// keepalives.
func TestEffectsSilenceLimit(t *testing.T) {
	if got := effectsSilenceLimit(500*time.Millisecond, 100*time.Millisecond); got != 500*time.Millisecond {
		t.Errorf("limit %v, want the heartbeat timeout 500ms", got)
	}
	if got := effectsSilenceLimit(500*time.Millisecond, time.Second); got != 4*time.Second {
		t.Errorf("limit %v, want four keepalives, 4s", got)
	}
}

// A member is in touch with its group while it leads, or follows a
// leader heard from within the heartbeat timeout.
func TestInTouch(t *testing.T) {
	const hb = 500 * time.Millisecond
	now := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		state raft.RaftState
		last  time.Time
		want  bool
	}{
		{raft.Leader, time.Time{}, true},
		{raft.Follower, now.Add(-hb), true},
		{raft.Follower, now.Add(-hb - time.Nanosecond), false},
		{raft.Follower, time.Time{}, false},
		{raft.Candidate, now, false},
		{raft.Shutdown, now, false},
	} {
		if got := inTouch(tc.state, tc.last, now, hb); got != tc.want {
			t.Errorf("inTouch(%v, %v before) = %v, want %v", tc.state, now.Sub(tc.last), got, tc.want)
		}
	}
}

// downSink records the NodeDowns handed to it.
type downSink struct {
	fsm.DiscardSink
	down []string
}

func (s *downSink) NodeDown(node string) { s.down = append(s.down, node) }

// A member streams this node's own release of its previous runs like any
// NodeDown of it: the release this run made reaches the node's clients
// as nothing, however late the stream brings it, while one made by an
// earlier run, or declared by the cluster, closes them.
func TestEffectsFollower_ThisRunsOwnReleaseClosesNothing(t *testing.T) {
	f := &effectsFollower{run: "now", last: map[string]uint64{}, consumers: map[string]consumerAt{}}
	s := &downSink{}
	down := func(run string) *proto.Effect {
		return &proto.Effect{Kind: &proto.Effect_NodeDown{NodeDown: "x"}, NodeDownRun: run}
	}
	f.hand(s, []*proto.Effect{down("now")})
	if len(s.down) != 0 {
		t.Fatalf("this run's release was handed on as %v", s.down)
	}
	f.hand(s, []*proto.Effect{down("before"), down("")})
	if want := []string{"x", "x"}; !slices.Equal(s.down, want) {
		t.Fatalf("an earlier run's release and a declared NodeDown: handed %v, want %v", s.down, want)
	}
}
