package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// quorumWatch is a node's view of its own contact with the cluster.
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
//     it), everything else in order.
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
// (Internal.Clock); while a majority answers, it waits for the election up
// to NodeDownAfter + 2×(HeartbeatTimeout + ElectionTimeout).
type quorumWatch struct {
	mu        sync.Mutex
	lastCheck time.Time
	suspect   bool
	gen       uint64 // counts the checks that found the node silent
	fencing   bool
	held      []heldEffect
	isolated  bool
	why       string

	tellMu sync.Mutex
	told   bool // the Pauser was last told to pause

	pingMu  sync.Mutex
	pinging map[string]bool
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
}

func newQuorumWatch() *quorumWatch { return &quorumWatch{pinging: map[string]bool{}} }

// suspectAfter is how long a silence makes the node hold its effects.
func (n *Node) suspectAfter() time.Duration { return n.cfg.NodeDownAfter / 2 }

// watchQuorum checks the node's contact with the cluster every
// NodeDownAfter/10 (at most every 100 ms).
func (n *Node) watchQuorum() {
	defer n.wg.Done()
	t := time.NewTicker(min(max(n.cfg.NodeDownAfter/10, 5*time.Millisecond), 100*time.Millisecond))
	defer t.Stop()
	for {
		n.checkQuorum(time.Now())
		select {
		case <-t.C:
		case <-n.closing:
			return
		}
	}
}

// voterIDs returns the voters of the latest raft configuration and
// whether this node is one.
func (n *Node) voterIDs() (ids []string, self bool) {
	f := n.group.Raft().GetConfiguration()
	if f.Error() != nil {
		return nil, false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		ids = append(ids, string(s.ID))
		self = self || string(s.ID) == n.cfg.NodeID
	}
	return ids, self
}

// quorumContact is when this node last knew itself part of a majority:
// as leader, when the quorum-th freshest voter (itself counting as now)
// last answered; otherwise when a leader last contacted it. Raft sets
// that contact time when a leader steps down, too, which for a leader
// cut off from the others is a lease after it lost them: until it hears
// of another leader, when the quorum-th voter last answered it counts.
func (n *Node) quorumContact(now time.Time, voters []string) time.Time {
	t := n.group.Raft().LastContact()
	leading := n.group.Raft().State() == raft.Leader
	if !leading && !n.reach.WasLeader() {
		return t
	}
	if !leading {
		t = time.Time{}
	}
	acks := []time.Time{now}
	for _, id := range voters {
		if id != n.cfg.NodeID {
			acks = append(acks, n.reach.LastAck(id))
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
func (n *Node) majorityAnswers(now time.Time, voters []string) bool {
	k := 0
	for _, id := range voters {
		if id == n.cfg.NodeID || now.Sub(n.reach.LastHeard(id)) < n.cfg.NodeDownAfter {
			k++
		}
	}
	return k > len(voters)/2
}

// checkQuorum is one round of the watch.
func (n *Node) checkQuorum(now time.Time) {
	w := n.watch
	voters, self := n.voterIDs()
	if !self || n.group.Raft().LastContact().IsZero() && n.group.Raft().State() != raft.Leader {
		// Not a voter (yet), or not yet in touch with a leader since the
		// start: there is no majority to lose yet, and no client either
		// (the AMQP listener waits for the node's first entries).
		w.mu.Lock()
		w.lastCheck = now
		w.mu.Unlock()
		return
	}
	silent := now.Sub(n.quorumContact(now, voters))
	if silent >= n.suspectAfter()/2 {
		n.pingPeers(voters)
	}
	electionGrace := 2 * (n.cfg.HeartbeatTimeout + n.cfg.ElectionTimeout)
	w.mu.Lock()
	stalled := !w.lastCheck.IsZero() && now.Sub(w.lastCheck) >= n.suspectAfter()
	w.lastCheck = now
	if silent >= n.suspectAfter() || stalled {
		w.suspect = true
		w.gen++
	}
	if silent >= n.cfg.NodeDownAfter && !w.isolated &&
		(silent >= n.cfg.NodeDownAfter+electionGrace || !n.majorityAnswers(now, voters)) {
		w.isolated = true
		w.why = fmt.Sprintf("broker forced connection closure with reason 'no quorum': this node has had no contact with a majority of the cluster for %v; reconnect to another node",
			silent.Round(time.Millisecond))
	}
	fence := w.suspect && !w.fencing && silent < n.suspectAfter()
	gen := w.gen
	if fence {
		w.fencing = true
	}
	w.mu.Unlock()
	n.tellPauser()
	if fence {
		n.wg.Add(1)
		go n.fence(gen)
	}
}

// checkStall is the apply path's check: when the watch has not run for
// the suspect time (the process was paused, or starved), what is applied
// now may be what the node missed while the cluster declared it down, so
// the node is suspect before it carries out any of it.
func (n *Node) checkStall() {
	w := n.watch
	if w == nil {
		return // a node built by hand in a test
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteStall(n.suspectAfter())
}

// noteStall makes the node suspect when the watch has not run for after
// (the process was paused). It runs for every effect the node hands its
// clients, so it reads the monotonic clock alone (time.Since, one read,
// where time.Now reads the wall clock too): lastCheck always has the
// monotonic reading of the watch's time.Now. Locks: w.mu held.
func (w *quorumWatch) noteStall(after time.Duration) {
	if !w.lastCheck.IsZero() && time.Since(w.lastCheck) >= after {
		w.suspect = true
		w.gen++
	}
}

// fence commits a Tick and, once it is applied here and the node was not
// silent again meanwhile, carries out the held effects that still stand
// and lets the node serve again.
func (n *Node) fence(gen uint64) {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaderWait)
	defer cancel()
	_, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
	w := n.watch
	n.group.State().Lock()
	w.mu.Lock()
	w.fencing = false
	ok := err == nil && w.gen == gen
	var held []heldEffect
	if ok {
		held, w.held = w.held, nil
		w.suspect, w.isolated = false, false
	}
	w.mu.Unlock()
	if ok {
		n.flushHeld(held, gen)
	}
	n.group.State().Unlock()
	if err != nil {
		n.log.Debug("catching up after a silence: the fence did not commit yet", "err", err)
	}
	n.tellPauser()
}

// flushHeld carries out the held effects that the state still stands for,
// in order. Locks: stateMu held.
func (n *Node) flushHeld(held []heldEffect, epoch uint64) {
	next := n.cfg.Effects
	if next == nil {
		return
	}
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
			if d.NoAck && i < down || !d.NoAck && len(n.group.State().Machine().Unacked(d.Consumer.GetChannel(), []uint64{d.DeliveryTag})) == 0 {
				dropped++
				continue
			}
			deliverIn(next, d, epoch)
		case e.cancel != nil:
			next.ConsumerCancelled(e.cancel)
		case e.timedOut != nil:
			next.ChannelTimedOut(e.timedOut, e.timeout)
		case e.consumerTimedOut != nil:
			next.ConsumerTimedOut(e.consumerTimedOut, e.timeout, e.tags)
		case e.down != "":
			next.NodeDown(e.down)
		}
	}
	if len(held) > 0 {
		n.log.Info("caught up after a silence", "effects_held", len(held), "deliveries_dropped", dropped)
	}
}

// tellPauser tells the Pauser when the node's isolation changed.
func (n *Node) tellPauser() {
	w := n.watch
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
		n.log.Warn("no contact with a majority of the cluster: closing client connections", "reason", why)
	} else {
		n.log.Info("in contact with a majority of the cluster again: taking clients")
	}
	if p := n.cfg.Pauser; p != nil {
		if isolated {
			p.Pause(why)
		} else {
			p.Resume()
		}
	}
}

// Isolated reports whether this node is cut off from a majority of the
// cluster (its clients are refused), and why.
func (n *Node) Isolated() (bool, string) {
	w := n.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.isolated, w.why
}

// pingPeers pings every other voter that has no ping in flight.
func (n *Node) pingPeers(voters []string) {
	w := n.watch
	for _, id := range voters {
		if id == n.cfg.NodeID {
			continue
		}
		m, ok := n.members.Get(id)
		addr := m.Meta.GetGrpcAddr()
		if !ok || addr == "" {
			continue
		}
		w.pingMu.Lock()
		busy := w.pinging[id]
		w.pinging[id] = true
		w.pingMu.Unlock()
		if busy {
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.pingPeer(id, addr, n.suspectAfter())
			w.pingMu.Lock()
			delete(w.pinging, id)
			w.pingMu.Unlock()
		}()
	}
}
