// Package quorum is a node's pause-minority watch: its view of its own
// contact with a majority of the cluster, the effects it holds while it
// is suspect of a silence, and the pause of its clients while it is cut
// off. It knows the node only through the Config it is given.
package quorum

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Watch is a node's view of its own contact with the cluster.
//
// A node cut off from the majority (a partition, or a pause of its
// process) is declared down by the leader after NodeDownAfter: the log
// requeues what its consumers held and drops its connections. Until the
// node applies that NodeDown it would go on serving: its publishers
// waited for confirms that could not come, and once it could hear the
// leader again it applied the entries it had missed, NodeDown last, and
// carried out their deliveries to consumers the log had already dropped,
// after other consumers got the same messages. So:
//
//   - silent for NodeDownAfter/2 (no leader contact, or as leader no
//     quorum of answers; or the watch itself did not run that long, as
//     after a pause of the process), the node becomes suspect: the
//     effects of what it applies are held. Once it hears from a leader
//     again, it commits a Tick (proposed after the silence, so every
//     NodeDown of it proposed during the silence is before it in the log)
//     and, when that is applied here, carries out what it held that the
//     state still stands for: a delivery only if it is still unacked on
//     its channel (a no-ack one only if no NodeDown of this node follows
//     it), everything else in order. A queue group's delivery is not the
//     metadata state's to judge: it goes on marked as decided before the
//     silence, for the sink to check in its own log (EpochSink).
//   - silent for NodeDownAfter and not in the middle of an election among
//     peers it reaches, the node is isolated: the Pauser closes its client
//     connections (320 CONNECTION_FORCED) and refuses new ones, as
//     RabbitMQ's pause_minority does, so clients move to a node of the
//     majority. It takes clients again after the Tick above.
//
// A follower hears nothing from its peers in steady state, only from the
// leader, and a leader's loss takes an election (HeartbeatTimeout to
// 2×HeartbeatTimeout, then a vote) which may well last longer than
// NodeDownAfter: a follower of the majority must not drop its clients
// meanwhile. So once silent for a while it pings the other voters
// (Config.Ping); while a majority answers, it waits for the election up
// to NodeDownAfter + 2×(HeartbeatTimeout + ElectionTimeout).
type Watch struct {
	cfg   Config
	after time.Duration // suspectAfter
	tick  time.Duration // the checks' period while anything is near (Run)
	gate  *gate         // nil without Config.Effects
	wg    sync.WaitGroup

	mu        sync.Mutex
	lastCheck time.Time
	wait      time.Duration // how long after lastCheck the next check is due
	suspect   bool
	gen       uint64 // counts the checks that found the node silent
	fencing   bool
	flushing  bool // held effects are going out: new ones queue behind them
	held      []heldEffect
	isolated  bool
	why       string

	tellMu sync.Mutex
	told   bool // the Pauser was last told to pause

	pingMu  sync.Mutex
	pinging map[string]bool
}

// Config is what the watch needs of its node.
type Config struct {
	NodeID           string
	NodeDownAfter    time.Duration
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	// LeaderWait bounds the commit of the fence.
	LeaderWait time.Duration
	Logger     *slog.Logger

	// Raft is the node's raft as the watch sees it.
	Raft Raft
	// Reach is whom this node's raft and pings reach.
	Reach Reach
	// Addr is the voter id's internal (gRPC) address, "" when unknown.
	Addr func(id string) string
	// Ping asks the voter id at addr whether it answers, within timeout,
	// and records an answer in Reach.
	Ping func(id, addr string, timeout time.Duration)
	// Fence commits a command proposed now (a Tick) and returns once it
	// is applied here.
	Fence func(ctx context.Context) error
	// State is the lock of the applied state, under which effects are
	// handed on; held while the held effects are flushed.
	State sync.Locker
	// Unacked reports whether d, a delivery of the metadata log (Group
	// 0), is still unacked on its channel in the applied state. Locks:
	// State held.
	Unacked func(d *fsm.Delivery) bool
	// Effects receives the effects the gate passes on (nil: none).
	Effects fsm.Sink
	// Pauser is told when the node's isolation changes (nil: no one).
	Pauser Pauser
}

// Raft is what the watch reads of the node's raft.
type Raft interface {
	// Voters returns the voters of the latest configuration and whether
	// this node is one.
	Voters() (ids []string, self bool)
	// LastContact is when a leader last contacted this node.
	LastContact() time.Time
	// Leading reports whether this node's raft is the leader.
	Leading() bool
}

// Reach is what the watch reads of whom the node reaches.
type Reach interface {
	// WasLeader reports whether this node led and has heard of no other
	// leader since.
	WasLeader() bool
	// LastAck is when the voter id last acknowledged this leader's raft.
	LastAck(id string) time.Time
	// LastHeard is when the voter id last answered this node at all.
	LastHeard(id string) time.Time
}

// Pauser is told when this node cannot serve clients because it lost
// contact with a majority of the cluster, and when it can again (the AMQP
// server). Its methods are called in turn, never concurrently, and must
// not call back into the node.
type Pauser interface {
	// Pause closes every client connection, saying reason, and refuses
	// new ones until Resume.
	Pause(reason string)
	// Resume takes clients again.
	Resume()
}

// EpochSink is a Sink that also learns, with each delivery, the silence
// epoch (Watch.Epoch) its node decided it in. The AMQP server is one: a
// delivery may wait in its buffers past a silence of the node (a paused
// process runs its socket writers first when it resumes), and by then the
// cluster may have declared the node down and handed the message to
// another consumer. The epoch lets it tell such a delivery from one
// decided after the silence, whatever goroutine resumes first.
type EpochSink interface {
	fsm.Sink
	// DeliverIn is Deliver with the epoch the delivery was decided in.
	DeliverIn(d *fsm.Delivery, epoch uint64)
}

// heldEffect is one effect held while the node is suspect; one field set.
type heldEffect struct {
	deliver  *fsm.Delivery
	cancel   *proto.ConsumerRef
	timedOut *proto.ChannelRef
	timeout  int64
	// consumerTimedOut (with timeout and tags) is a ConsumerTimedOut.
	consumerTimedOut *proto.ConsumerRef
	tags             []uint64
	down             string
	// at is when the log told this node of down: held, it reaches the
	// node's clients later (DownSince).
	at time.Time
}

// DownSince is a sink that can be told when a NodeDown of this node was
// applied: only the clients connected by then had anything the log
// dropped. A NodeDown held through a silence (one the cluster declared,
// or an earlier run's release, applied while the node was suspect)
// reaches the sink after the node may have taken new clients, and those
// clients' channels came into the log after it.
type DownSince interface {
	NodeDownSince(node string, at time.Time)
}

// New returns the watch of a node; Run runs it.
func New(cfg Config) *Watch {
	tick := min(max(cfg.NodeDownAfter/10, 5*time.Millisecond), 100*time.Millisecond)
	w := &Watch{cfg: cfg, after: cfg.NodeDownAfter / 2, tick: tick, wait: tick, pinging: map[string]bool{}}
	if cfg.Effects != nil {
		w.gate = &gate{w: w, next: cfg.Effects}
		w.gate.epochs, _ = cfg.Effects.(EpochSink)
	}
	return w
}

// Run checks the node's contact with the cluster until closing is
// closed, and returns once what it started (pings, a fence) has
// returned: every NodeDownAfter/10 (at most every 100 ms, the tick)
// while the node is suspect, isolated, catching up or has been silent
// for NodeDownAfter/4, and otherwise when that silence would begin, if
// nothing is heard meanwhile (calmWait). A silence grows no faster than
// the clock, so no threshold is crossed unseen, and an idle node is not
// woken ten times a second to find its leader there.
func (w *Watch) Run(closing <-chan struct{}) {
	defer w.wg.Wait()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		t.Reset(w.check(time.Now()))
		select {
		case <-t.C:
		case <-closing:
			return
		}
	}
}

// contact is when this node last knew itself part of a majority:
// as leader, when the quorum-th freshest voter (itself counting as now)
// last answered; otherwise when a leader last contacted it. Raft sets
// that contact time when a leader steps down, too, which for a leader
// cut off from the others is a lease after it lost them: until it hears
// of another leader, when the quorum-th voter last answered it counts.
func (w *Watch) contact(now time.Time, voters []string) time.Time {
	t := w.cfg.Raft.LastContact()
	leading := w.cfg.Raft.Leading()
	if !leading && !w.cfg.Reach.WasLeader() {
		return t
	}
	if !leading {
		t = time.Time{}
	}
	acks := []time.Time{now}
	for _, id := range voters {
		if id != w.cfg.NodeID {
			acks = append(acks, w.cfg.Reach.LastAck(id))
		}
	}
	slices.SortFunc(acks, func(a, b time.Time) int { return b.Compare(a) })
	if a := acks[len(voters)/2]; a.After(t) {
		return a
	}
	return t
}

// majorityAnswers reports whether a majority of the voters (this node
// included) answered this node within NodeDownAfter.
func (w *Watch) majorityAnswers(now time.Time, voters []string) bool {
	k := 0
	for _, id := range voters {
		if id == w.cfg.NodeID || now.Sub(w.cfg.Reach.LastHeard(id)) < w.cfg.NodeDownAfter {
			k++
		}
	}
	return k > len(voters)/2
}

// check is one round of the watch; it returns how long until the next.
func (w *Watch) check(now time.Time) time.Duration {
	voters, self := w.cfg.Raft.Voters()
	if !self || w.cfg.Raft.LastContact().IsZero() && !w.cfg.Raft.Leading() {
		// Not a voter (yet), or not yet in touch with a leader since the
		// start: there is no majority to lose yet, and no client either
		// (the AMQP listener waits for the node's first entries).
		w.mu.Lock()
		w.lastCheck, w.wait = now, w.tick
		w.mu.Unlock()
		return w.tick
	}
	silent := now.Sub(w.contact(now, voters))
	if silent >= w.after/2 {
		w.pingPeers(voters)
	}
	electionGrace := 2 * (w.cfg.HeartbeatTimeout + w.cfg.ElectionTimeout)
	w.mu.Lock()
	stalled := w.stalled(now)
	if silent >= w.after || stalled {
		w.suspect = true
		w.gen++
	}
	if silent >= w.cfg.NodeDownAfter && !w.isolated &&
		(silent >= w.cfg.NodeDownAfter+electionGrace || !w.majorityAnswers(now, voters)) {
		w.isolated = true
		w.why = fmt.Sprintf("broker forced connection closure with reason 'no quorum': this node has had no contact with a majority of the cluster for %v; reconnect to another node",
			silent.Round(time.Millisecond))
	}
	fence := w.suspect && !w.fencing && silent < w.after
	gen := w.gen
	if fence {
		w.fencing = true
	}
	wait := w.tick
	if !w.suspect && !w.isolated && !w.fencing && !w.flushing {
		wait = calmWait(silent, w.after, w.tick)
	}
	w.lastCheck, w.wait = now, wait
	w.mu.Unlock()
	w.tellPauser()
	if fence {
		w.wg.Add(1)
		go w.fence(gen)
	}
	return wait
}

// calmWait is how long a node in touch, silent for silent, waits before
// its next check: until the silence would reach after/2, where its pings
// start, and never less than the tick.
func calmWait(silent, after, tick time.Duration) time.Duration {
	return max(after/2-silent, tick)
}

// stallAfter is how long after the last check the watch counts as not
// having run: the suspect time, plus what the last check's wait adds
// to the tick, so that a watch is stalled when it is late by the
// suspect time less a tick, whatever it waited. Locks: w.mu held.
func (w *Watch) stallAfter() time.Duration {
	return w.after + w.wait - w.tick
}

// stalled reports whether the watch has not run for stallAfter at now.
// Locks: w.mu held.
func (w *Watch) stalled(now time.Time) bool {
	return !w.lastCheck.IsZero() && now.Sub(w.lastCheck) >= w.stallAfter()
}

// CheckStall is the apply path's check: when the watch has not run for
// the suspect time (the process was paused, or starved), what is applied
// now may be what the node missed while the cluster declared it down, so
// the node is suspect before it carries out any of it.
func (w *Watch) CheckStall() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteStall()
}

// Epoch counts this node's silences (cluster's Node.SilenceEpoch).
func (w *Watch) Epoch() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteStall()
	return w.gen
}

// noteStall makes the node suspect when the watch has not run for the
// suspect time (the process was paused). It runs for every effect the
// node hands its clients, so it reads the monotonic clock alone
// (time.Since, one read, where time.Now reads the wall clock too):
// lastCheck always has the monotonic reading of the watch's time.Now.
// Locks: w.mu held.
func (w *Watch) noteStall() {
	if !w.lastCheck.IsZero() && time.Since(w.lastCheck) >= w.stallAfter() {
		w.suspect = true
		w.gen++
	}
}

// fence commits a Tick and, once it is applied here and the node was not
// silent again meanwhile, carries out the held effects that still stand
// and lets the node serve again.
func (w *Watch) fence(gen uint64) {
	defer w.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.LeaderWait)
	defer cancel()
	err := w.cfg.Fence(ctx)
	w.cfg.State.Lock()
	w.mu.Lock()
	w.fencing = false
	ok := err == nil && w.gen == gen
	var held []heldEffect
	if ok {
		held, w.held = w.held, nil
		w.suspect, w.isolated = false, false
		w.flushing = true
	}
	w.mu.Unlock()
	// A queue group applies under its own lock, not State: what it
	// hands on while the held effects go out is held behind them, so
	// that a consumer gets its deliveries in log order.
	for ok {
		w.flush(held, gen)
		w.mu.Lock()
		if w.suspect {
			// Silent again: the next fence flushes what is held.
			held = nil
		} else {
			held, w.held = w.held, nil
		}
		w.flushing = len(held) > 0
		ok = w.flushing
		w.mu.Unlock()
	}
	w.cfg.State.Unlock()
	if err != nil {
		w.cfg.Logger.Debug("catching up after a silence: the fence did not commit yet", "err", err)
	}
	w.tellPauser()
}

// flush carries out the held effects that the state still stands for,
// in order. Locks: State held.
func (w *Watch) flush(held []heldEffect, epoch uint64) {
	g := w.gate
	if g == nil {
		return
	}
	next := g.next
	down := -1 // the last NodeDown of this node among them
	for i, e := range held {
		if e.down != "" {
			down = i
		}
	}
	dropped := 0
	for i, e := range held {
		switch {
		case e.deliver != nil:
			d := e.deliver
			if d.NoAck && i < down {
				dropped++
				continue
			}
			if d.Group != 0 {
				// The fence passed the metadata log only: a queue
				// group's log may not have applied its NodeDown of
				// this node yet, and State says nothing of its
				// deliveries. Handed on as decided before the
				// silence, the delivery is checked by the sink in its
				// own log once that log has caught up (EpochSink).
				g.deliverIn(d, epoch-min(epoch, 1))
				continue
			}
			if !d.NoAck && !w.cfg.Unacked(d) {
				dropped++
				continue
			}
			g.deliverIn(d, epoch)
		case e.cancel != nil:
			next.ConsumerCancelled(e.cancel)
		case e.timedOut != nil:
			next.ChannelTimedOut(e.timedOut, e.timeout)
		case e.consumerTimedOut != nil:
			next.ConsumerTimedOut(e.consumerTimedOut, e.timeout, e.tags)
		case e.down != "":
			if ds, ok := next.(DownSince); ok {
				ds.NodeDownSince(e.down, e.at)
			} else {
				next.NodeDown(e.down)
			}
		}
	}
	if len(held) > 0 {
		w.cfg.Logger.Info("caught up after a silence", "effects_held", len(held), "deliveries_dropped", dropped)
	}
}

// tellPauser tells the Pauser when the node's isolation changed.
func (w *Watch) tellPauser() {
	w.tellMu.Lock()
	defer w.tellMu.Unlock()
	w.mu.Lock()
	isolated, why := w.isolated, w.why
	w.mu.Unlock()
	if isolated == w.told {
		return
	}
	w.told = isolated
	if isolated {
		w.cfg.Logger.Warn("no contact with a majority of the cluster: closing client connections", "reason", why)
	} else {
		w.cfg.Logger.Info("in contact with a majority of the cluster again: taking clients")
	}
	if p := w.cfg.Pauser; p != nil {
		if isolated {
			p.Pause(why)
		} else {
			p.Resume()
		}
	}
}

// Isolated reports whether this node is cut off from a majority of the
// cluster (its clients are refused), and why.
func (w *Watch) Isolated() (bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.isolated, w.why
}

// Refusing reports why this node does not take clients now, "" when it
// does: it is isolated, or the watch has not run for the suspect time.
// A process that was paused (or starved) learns only at the watch's
// first check after it resumes whether the cluster declared it down
// meanwhile; until then, a readiness probe that asked it would send
// clients to a node about to close their connections.
func (w *Watch) Refusing() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.isolated {
		return w.why
	}
	if !w.lastCheck.IsZero() {
		if d := time.Since(w.lastCheck); d >= w.stallAfter() {
			return fmt.Sprintf("this node did not run for %v (paused or starved): it is checking its contact with the cluster", d.Round(time.Millisecond))
		}
	}
	return ""
}

// pingPeers pings every other voter that has no ping in flight.
func (w *Watch) pingPeers(voters []string) {
	for _, id := range voters {
		if id == w.cfg.NodeID {
			continue
		}
		addr := w.cfg.Addr(id)
		if addr == "" {
			continue
		}
		w.pingMu.Lock()
		busy := w.pinging[id]
		w.pinging[id] = true
		w.pingMu.Unlock()
		if busy {
			continue
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.cfg.Ping(id, addr, w.after)
			w.pingMu.Lock()
			delete(w.pinging, id)
			w.pingMu.Unlock()
		}()
	}
}
