package quorum

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// epochRecorder is an EpochSink that keeps what it was handed.
type epochRecorder struct {
	fsm.Sink
	epochs []uint64
}

func (r *epochRecorder) DeliverIn(_ *fsm.Delivery, epoch uint64) { r.epochs = append(r.epochs, epoch) }

// liveGate is the gate of a watch that just ran, in front of an
// EpochSink, and a delivery for it.
func liveGate(nodeDownAfter time.Duration) (*Watch, fsm.Sink, *epochRecorder, *fsm.Delivery) {
	rec := &epochRecorder{}
	w := New(Config{NodeDownAfter: nodeDownAfter, Effects: rec})
	w.lastCheck = time.Now()
	return w, w.Sink(), rec, &fsm.Delivery{Consumer: &proto.ConsumerRef{Tag: "c"}, DeliveryTag: 1}
}

// A pause of the process between two effects of one entry (the apply
// path checks for a stall once per batch of entries): the effects after
// it are held, and a goroutine that resumes before the watch (a socket
// writer) sees a new silence epoch, not the one the effects before the
// pause were decided in.
func TestSilence_PauseBetweenEffectsIsSeenByTheGateAndTheEpoch(t *testing.T) {
	w, g, rec, d := liveGate(time.Second)
	g.Deliver(d)
	if len(rec.epochs) != 1 {
		t.Fatalf("a delivery of a live node was not passed on: %v", rec.epochs)
	}
	before := rec.epochs[0]
	if e := w.Epoch(); e != before {
		t.Fatalf("Epoch() = %d with no silence, the delivery was decided in %d", e, before)
	}

	// The process stops for longer than NodeDownAfter/2: the watch did
	// not run meanwhile.
	w.mu.Lock()
	w.lastCheck = time.Now().Add(-w.stallAfter())
	w.mu.Unlock()
	if e := w.Epoch(); e <= before {
		t.Fatalf("Epoch() = %d after a stall, want more than %d", e, before)
	}
	g.Deliver(&fsm.Delivery{Consumer: &proto.ConsumerRef{Tag: "c"}, DeliveryTag: 2})
	if len(rec.epochs) != 1 || len(w.held) != 1 {
		t.Fatalf("the delivery after the stall was passed on (%v), not held (%d held)", rec.epochs, len(w.held))
	}

	// The gate alone sees the stall too, when it comes first.
	w.mu.Lock()
	w.suspect, w.held = false, nil
	w.lastCheck = time.Now().Add(-w.stallAfter())
	w.mu.Unlock()
	g.Deliver(&fsm.Delivery{Consumer: &proto.ConsumerRef{Tag: "c"}, DeliveryTag: 3})
	if len(rec.epochs) != 1 || len(w.held) != 1 {
		t.Fatalf("a delivery applied right after a stall was passed on (%v), not held (%d held)", rec.epochs, len(w.held))
	}
}

// timeoutRec records the consumer and channel timeouts a gate passes on.
type timeoutRec struct {
	fsm.Sink
	consumers, channels []string
}

func (r *timeoutRec) ConsumerTimedOut(c *proto.ConsumerRef, _ int64, _ []uint64) {
	r.consumers = append(r.consumers, c.GetTag())
}

func (r *timeoutRec) ChannelTimedOut(ch *proto.ChannelRef, _ int64) {
	r.channels = append(r.channels, ch.GetConnection())
}

// While the node is suspect, its effects wait, consumer timeouts too, and
// go out in order once it has caught up.
func TestGateSink_HoldsConsumerTimeoutsWhileSuspect(t *testing.T) {
	rec := &timeoutRec{}
	w := New(Config{NodeID: "me", Effects: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	w.suspect = true
	g := w.Sink()
	c := &proto.ConsumerRef{Channel: &proto.ChannelRef{Node: "me"}, Tag: "slow"}
	g.ConsumerTimedOut(c, 500, []uint64{1, 3})
	g.ChannelTimedOut(&proto.ChannelRef{Node: "me", Connection: "f"}, 500)
	if len(rec.consumers) != 0 || len(rec.channels) != 0 || len(w.held) != 2 {
		t.Fatalf("passed on while suspect: %v %v, held %d", rec.consumers, rec.channels, len(w.held))
	}
	w.flush(w.held, w.gen)
	if len(rec.consumers) != 1 || rec.consumers[0] != "slow" || len(rec.channels) != 1 {
		t.Fatalf("after catching up: consumers %v channels %v", rec.consumers, rec.channels)
	}
}

// downRec records the NodeDowns it is told, and since when.
type downRec struct {
	fsm.DiscardSink
	since []time.Time
}

func (r *downRec) NodeDown(string) { r.since = append(r.since, time.Time{}) }

func (r *downRec) NodeDownSince(_ string, at time.Time) { r.since = append(r.since, at) }

// A NodeDown held while the node is suspect goes out after it caught up
// with when the log applied it: only the clients connected by then lose
// their connections (a NodeDown held while the node's checks stalled
// must not close the clients it took since).
func TestGateSink_AHeldNodeDownSaysWhenItWasApplied(t *testing.T) {
	rec := &downRec{}
	w := New(Config{NodeID: "me", Effects: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	w.suspect = true
	g := w.Sink()
	from := time.Now()
	g.NodeDown("me")
	to := time.Now()
	if len(rec.since) != 0 {
		t.Fatal("passed on while suspect")
	}
	w.flush(w.held, w.gen)
	if len(rec.since) != 1 || rec.since[0].Before(from) || rec.since[0].After(to) {
		t.Fatalf("after catching up: told %v, want once, since when it was applied (%v to %v)", rec.since, from, to)
	}
}

// A delivery a queue group's log made while the node was suspect is not
// the metadata log's to judge: the fence passed the metadata log alone,
// whose state holds none of that group's deliveries. It goes on as
// decided before the silence, for the sink to check in its own log; a
// metadata delivery the state no longer holds is dropped.
func TestGateSink_QueueGroupDeliveryHeldOverASilenceIsCheckedInItsOwnLog(t *testing.T) {
	rec := &epochRecorder{}
	w := New(Config{NodeID: "me", Effects: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Unacked: func(d *fsm.Delivery) bool { return false }})
	w.suspect, w.gen = true, 3
	g := w.Sink()
	ch := &proto.ChannelRef{Node: "me", Connection: "c"}
	g.Deliver(&fsm.Delivery{Consumer: &proto.ConsumerRef{Channel: ch, Tag: "meta"}, DeliveryTag: 7})
	g.Deliver(&fsm.Delivery{Consumer: &proto.ConsumerRef{Channel: ch, Tag: "placed"}, DeliveryTag: 7, Group: 2})
	if len(rec.epochs) != 0 || len(w.held) != 2 {
		t.Fatalf("passed on while suspect: %v, held %d", rec.epochs, len(w.held))
	}
	w.flush(w.held, w.gen)
	if len(rec.epochs) != 1 {
		t.Fatalf("after catching up %d deliveries went on, want the queue group's one alone: %v", len(rec.epochs), rec.epochs)
	}
	if rec.epochs[0] >= w.gen {
		t.Fatalf("the queue group's delivery went on in epoch %d, not before the silence's %d: nothing would check it in its log", rec.epochs[0], w.gen)
	}
}

// A delivery that came on a member's stream opened before a silence of
// the node goes on as decided before it, even once the node caught up
// and is no longer suspect: the member went on deciding for the node's
// consumers while the node was silent, and the log may have given what
// it sent to others since. One from a stream opened in the current epoch
// goes on in it; one that arrives while the node is suspect is held.
func TestDeliverBy_AStreamOpenedBeforeASilenceIsCheckedAfterIt(t *testing.T) {
	w, _, rec, d := liveGate(time.Hour)
	w.gen = 2
	w.DeliverBy(d, 1)
	w.DeliverBy(d, 2)
	w.DeliverBy(d, 5)
	if !slices.Equal(rec.epochs, []uint64{1, 2, 2}) {
		t.Fatalf("handed on in epochs %v, want 1 (its stream's), 2, 2 (the node's)", rec.epochs)
	}
	w.suspect = true
	w.DeliverBy(d, 1)
	if len(rec.epochs) != 3 || len(w.held) != 1 {
		t.Fatalf("while suspect: handed on %v, held %d", rec.epochs, len(w.held))
	}
}

// orderRec records the tags of the deliveries handed on, and calls
// during once, at the first: a queue group's apply running while the held
// effects go out.
type orderRec struct {
	fsm.Sink
	tags   []uint64
	during func()
}

func (r *orderRec) DeliverIn(d *fsm.Delivery, _ uint64) {
	r.tags = append(r.tags, d.DeliveryTag)
	if f := r.during; f != nil {
		r.during = nil
		f()
	}
}

// A queue group applies under its own lock, so it may hand on a delivery
// while the deliveries held over a silence are going out: it waits
// behind them, and the consumer gets them in the log's order.
func TestGateSink_AQueueGroupDeliveryWaitsBehindTheHeldOnes(t *testing.T) {
	rec := &orderRec{}
	ok := func(*fsm.Delivery) bool { return true }
	w := New(Config{NodeID: "me", Effects: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Unacked: ok,
		LeaderWait: time.Second, State: &sync.Mutex{}, Fence: func(context.Context) error { return nil }})
	w.suspect, w.gen, w.fencing = true, 1, true
	g := w.Sink()
	ch := &proto.ChannelRef{Node: "me", Connection: "c"}
	delivery := func(tag uint64) *fsm.Delivery {
		return &fsm.Delivery{Consumer: &proto.ConsumerRef{Channel: ch, Tag: "placed"}, DeliveryTag: tag, Group: 2}
	}
	g.Deliver(delivery(1))
	g.Deliver(delivery(2))
	rec.during = func() { g.Deliver(delivery(3)) }
	w.wg.Add(1)
	w.fence(1)
	if !slices.Equal(rec.tags, []uint64{1, 2, 3}) {
		t.Fatalf("handed on %v, want 1 2 3", rec.tags)
	}
	g.Deliver(delivery(4))
	if !slices.Equal(rec.tags, []uint64{1, 2, 3, 4}) || len(w.held) != 0 {
		t.Fatalf("after catching up: handed on %v, %d held", rec.tags, len(w.held))
	}
}

// BenchmarkGateSink_Deliver is what the silence gate adds to each
// delivery of a live node: its lock and one check of the clock.
func BenchmarkGateSink_Deliver(b *testing.B) {
	_, g, rec, d := liveGate(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		g.Deliver(d)
		rec.epochs = rec.epochs[:0]
	}
}

// fakeRaft is a follower's raft: a voter among three whose leader last
// contacted it at contact.
type fakeRaft struct{ contact time.Time }

func (r *fakeRaft) Voters() ([]string, bool) { return []string{"n1", "n2", "n3"}, true }
func (r *fakeRaft) LastContact() time.Time   { return r.contact }
func (r *fakeRaft) Leading() bool            { return false }
func (fakeReach) WasLeader() bool            { return false }
func (fakeReach) LastAck(string) time.Time   { return time.Time{} }
func (fakeReach) LastHeard(string) time.Time { return time.Time{} }

// fakeReach is a node no peer answers.
type fakeReach struct{}

// A node refuses clients while it is cut off, and also from the moment
// its process resumes from a pause until its watch has looked: a
// readiness probe answered first must not send clients to a node about
// to close their connections. Once the watch has looked and found a
// leader in touch, it takes them again.
func TestRefusing_FromAResumeUntilTheWatchLooks(t *testing.T) {
	r := &fakeRaft{contact: time.Now()}
	w := New(Config{NodeID: "n1", NodeDownAfter: time.Second, HeartbeatTimeout: 100 * time.Millisecond,
		ElectionTimeout: 100 * time.Millisecond, Raft: r, Reach: fakeReach{},
		Addr: func(string) string { return "" }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		State: &sync.Mutex{}, Fence: func(context.Context) error { return errors.New("no fence in this test") }})
	defer w.wg.Wait()
	w.check(time.Now())
	if why := w.Refusing(); why != "" {
		t.Fatalf("a node in touch with its leader refuses clients: %q", why)
	}

	// The process was paused for longer than the suspect time.
	w.mu.Lock()
	w.lastCheck = time.Now().Add(-w.stallAfter())
	w.mu.Unlock()
	if why := w.Refusing(); !strings.Contains(why, "did not run") {
		t.Fatalf("right after a pause, before the watch looked: Refusing() = %q", why)
	}
	w.check(time.Now())
	if why := w.Refusing(); why != "" {
		t.Fatalf("the watch looked and the leader is in touch, yet Refusing() = %q", why)
	}

	// No leader for longer than NodeDownAfter and its election grace,
	// and no peer answers: the node is isolated, and says why.
	r.contact = time.Now().Add(-time.Minute)
	w.check(time.Now())
	if iso, why := w.Isolated(); !iso || w.Refusing() != why {
		t.Fatalf("cut off: Isolated() = %v %q, Refusing() = %q", iso, why, w.Refusing())
	}
}

// A node in touch with its leader checks again when its silence would
// reach the point where its pings start (NodeDownAfter/4), not every
// tick; once it is that silent, or suspect, it checks every tick. A
// watch that waited longer is stalled only when it is as late as one
// that waited a tick: the suspect time less a tick.
func TestCheck_WaitsUntilASilenceCouldBeginAndEveryTickOnceNear(t *testing.T) {
	now := time.Now()
	r := &fakeRaft{contact: now.Add(-100 * time.Millisecond)}
	w := New(Config{NodeID: "n1", NodeDownAfter: time.Second, HeartbeatTimeout: 100 * time.Millisecond,
		ElectionTimeout: 100 * time.Millisecond, Raft: r, Reach: fakeReach{},
		Addr: func(string) string { return "" }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		State: &sync.Mutex{}, Fence: func(context.Context) error { return errors.New("no fence in this test") }})
	defer w.wg.Wait()
	if w.tick != 100*time.Millisecond || w.after != 500*time.Millisecond {
		t.Fatalf("tick %v, suspect after %v: the cases below assume 100ms and 500ms", w.tick, w.after)
	}
	if got := w.check(now); got != 150*time.Millisecond {
		t.Errorf("silent for 100ms: next check in %v, want 150ms (when the silence reaches 250ms)", got)
	}
	w.mu.Lock()
	if w.stalled(now.Add(w.after)) || !w.stalled(now.Add(w.after+150*time.Millisecond-w.tick)) {
		t.Errorf("after a wait of 150ms the watch must be stalled from %v after its check, no earlier", w.after+150*time.Millisecond-w.tick)
	}
	w.mu.Unlock()
	r.contact = now.Add(-200 * time.Millisecond)
	if got := w.check(now); got != w.tick {
		t.Errorf("silent for 200ms, 50ms before the pings: next check in %v, want the tick", got)
	}
	r.contact = now.Add(-300 * time.Millisecond)
	if got := w.check(now); got != w.tick {
		t.Errorf("silent for 300ms, pinging: next check in %v, want the tick", got)
	}
	r.contact = now
	w.mu.Lock()
	w.suspect = true
	w.mu.Unlock()
	if got := w.check(now); got != w.tick {
		t.Errorf("suspect, its fence under way: next check in %v, want the tick", got)
	}
}
