package cluster

import (
	"context"
	"crypto/rand"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// leaderTerm is one stretch of leadership of this node. Its loops run
// until ctx is cancelled, when leadership is lost.
type leaderTerm struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// monitorLeadership follows raft's leadership notifications: on gaining
// leadership it starts leaderLoop, on losing it cancels the loop's context
// and waits for it to stop.
func (n *Node) monitorLeadership() {
	defer n.wg.Done()
	var cur *leaderTerm
	stop := func() {
		if cur == nil {
			return
		}
		n.lead.Store(nil)
		cur.cancel()
		<-cur.done
		cur = nil
		n.changed.Signal()
	}
	for {
		select {
		case isLeader := <-n.notifyCh:
			if isLeader && cur == nil {
				ctx, cancel := context.WithCancel(context.Background())
				cur = &leaderTerm{ctx: ctx, cancel: cancel, done: make(chan struct{})}
				go n.leaderLoop(cur)
			} else if !isLeader {
				stop()
			}
		case <-n.closing:
			stop()
			return
		}
	}
}

// leaderLoop runs one term of leadership: barrier, then establish (stamp
// floor, readiness, defaults), then the leader-only loops, whose only
// output is proposed commands.
func (n *Node) leaderLoop(lt *leaderTerm) {
	defer close(lt.done)
	n.log.Info("gained leadership")
	defer n.log.Info("lost leadership")
	t0 := time.Now()
	for {
		err := n.await(lt.ctx, n.group.Raft().Barrier(n.cfg.LeaderWait))
		if err == nil {
			break
		}
		n.log.Warn("barrier failed", "err", err)
		if !sleepCtx(lt.ctx, 100*time.Millisecond) {
			return
		}
	}
	// Everything committed before this term is applied: the log clock is the
	// latest stamp any earlier leader gave, so ours continue from there,
	// anchored to the quorum's clocks (package clock).
	clock := n.logClock()
	tb := time.Since(t0)
	if !n.clocks.StartTerm(lt.ctx, clock) {
		return
	}
	// Nothing is decided by time (deaths, releases, leases) from the last
	// stamp until here: the election, the barrier (a restarted node's
	// replay of its log) and the wait for the quorum's clocks.
	n.log.Info("leading", "barrier", tb.Round(time.Millisecond), "clock_wait", (time.Since(t0) - tb).Round(time.Millisecond),
		"since_last_stamp", time.Duration(n.clocks.Stamper().Peek()-clock)*time.Millisecond)
	// Decided before this term stamps anything: were we all down?
	wasDown := n.clusterWasDown(n.group.Raft(), clock)
	n.group.Forwarder().Retire()
	n.resetReach()
	n.lead.Store(lt)
	n.changed.Signal()
	if wasDown {
		n.restartLeasesIn(lt.ctx, n.group)
	}

	var wg sync.WaitGroup
	loops := append(append([]func(context.Context){n.initDefaults}, n.dueDuties(n.group)...), n.reconcileLoop,
		func(ctx context.Context) { n.handOffLoop(ctx, n.group) })
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(lt.ctx)
		}()
	}
	wg.Wait()
}

// clusterWasDown reports whether a quorum of the voters started after the
// last entry was stamped at clock: then no quorum ran in between, and the
// cluster was down. A failover keeps a quorum running and leaves leases
// alone; a whole-cluster restart restarts them.
func (n *Node) clusterWasDown(r *raft.Raft, clock int64) bool {
	if clock == 0 {
		return false
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	members := n.members.All()
	voters, fresh := 0, 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		boot := members[string(s.ID)].Meta.GetBootMs()
		if string(s.ID) == n.cfg.NodeID {
			boot = n.gossip.BootMs()
		}
		if boot > clock {
			fresh++
		}
	}
	return voters > 0 && fresh > voters/2
}

// restartLeasesIn proposes RestartLeases in g's log until it commits or
// ctx ends, and reports whether it committed.
func (n *Node) restartLeasesIn(ctx context.Context, g *group.Group) bool {
	for {
		res, err := g.Submitter().SubmitBatch(ctx, []*proto.Command{{Cmd: &proto.Command_RestartLeases{RestartLeases: &proto.RestartLeases{}}}})
		if err == nil {
			n.log.Info("the cluster was down: queue leases restart", "group", g.ID(), "index", res[0].GetIndex())
			return true
		}
		n.log.Warn("restarting leases failed", "group", g.ID(), "err", err)
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// defaultCommands are the first entry of a new cluster: the "/" vhost, the
// default user (an administrator) and its permissions on "/".
func (n *Node) defaultCommands() ([]*proto.Command, error) {
	salt := make([]byte, fsm.PasswordSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	u := n.cfg.DefaultUser
	return []*proto.Command{
		{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/", Description: "Default virtual host"}}},
		{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{
			Name:          u,
			PasswordHash:  fsm.HashPassword(salt, n.cfg.DefaultPassword),
			HashAlgorithm: fsm.PasswordHashAlgorithm,
			Tags:          []string{"administrator"},
		}}},
		{Cmd: &proto.Command_PermissionSet{PermissionSet: &proto.PermissionSet{
			User: u, Vhost: "/", Configure: ".*", Write: ".*", Read: ".*",
		}}},
	}, nil
}

// initDefaults proposes the defaults in one entry if the state machine was
// never initialised.
func (n *Node) initDefaults(ctx context.Context) {
	for {
		var done bool
		n.View(func(m *fsm.Machine) { done = m.Initialized() })
		if done {
			return
		}
		cmds, err := n.defaultCommands()
		if err == nil {
			_, err = n.SubmitBatch(ctx, cmds)
		}
		if err == nil {
			n.log.Info("created the default vhost and user", "user", n.cfg.DefaultUser)
			return
		}
		n.log.Warn("proposing the defaults failed", "err", err)
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// reconcileLoop keeps the raft configuration in line with the members:
// alive members become voters, members that left are removed, and members
// dead for longer than NodeDownAfter (or gone), or servers raft has not
// reached for that long, are declared down once. After each round it
// raises the log's protocol level if every server now announces more: at
// the start of the term, and whenever membership or a member's metadata
// changes (an upgraded node rejoins announcing its protocol); then it
// creates the queue groups asked for that the log does not hold yet, and
// spreads the queue groups' members over the voters when they changed.
//
// Between changes it runs again when the first server could have been
// silent, or the first member dead, for NodeDownAfter (reconcileAfter),
// so a node is declared down when its time is up, not at the next of a
// ticker's rounds, and an idle cluster's leader is not woken five
// times a second to find everyone there. While a round had work to do
// (a voter to add or remove, a node to declare down) or the log has
// yet to reach what the node asks of it (its protocol level, the queue
// groups, placement: steps that wait on each other), it runs again
// after the shortest wait, as a new cluster forms.
func (n *Node) reconcileLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	downed := newDowns()
	spread := ""
	for {
		wait := n.changed.Wait()
		due, soon := n.reconcile(ctx, downed)
		n.raiseProtocol(ctx)
		n.proposeQueueGroups(ctx)
		n.proposePlacement(ctx)
		_ = n.spreadQueueGroups(ctx, &spread, false)
		soon = soon || !n.logSettled()
		t.Reset(reconcileAfter(time.Until(due), n.cfg.NodeDownAfter, n.cfg.ReconcileInterval, soon))
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// reconcileAfter is how long the reconcile loop waits for a change before
// it runs again, when the first server's or member's time to be declared
// down is up after due: that long, so that it is declared down on time,
// but at most half of NodeDownAfter or the reconcile interval, so what a
// round retries waits no longer, and at most an eighth of NodeDownAfter
// when soon asks for it (a round had work, the log is not settled, or a
// node declared down is looked at to find it back) or when due is past (a
// declaration that failed is tried again).
func reconcileAfter(due, nodeDownAfter, interval time.Duration, soon bool) time.Duration {
	most := min(nodeDownAfter/2, interval)
	if soon || due <= 0 {
		most = min(most, nodeDownAfter/8)
	}
	if due <= 0 {
		return most
	}
	return min(max(due, time.Millisecond), most)
}

// logSettled reports whether the metadata log holds what this node asks
// of it at start: this binary's protocol level, the queue groups it asks
// for, and placement on if asked.
func (n *Node) logSettled() bool {
	var level uint32
	var have int
	var placing bool
	n.View(func(m *fsm.Machine) { level, have, placing = m.ProtocolLevel(), len(m.QueueGroups()), m.Placing() })
	if level < fsm.Protocol || n.cfg.PlaceQueues && !placing {
		return false
	}
	return have >= wantQueueGroups(n.cfg.QueueGroups, n.cfg.QueueGroupsPerNode, len(n.metadataVoters()))
}

// reconcile runs one round (reconcileLoop) and returns when the first
// server of the configuration not declared down will have been silent,
// or the first such member dead, for NodeDownAfter (in the past when one
// has and its declaration failed), and whether the next round should
// come soon: it had work to do, or a node declared down is to be found
// back.
func (n *Node) reconcile(ctx context.Context, downed *downs) (due time.Time, soon bool) {
	now := time.Now()
	left := n.cfg.NodeDownAfter
	f := n.group.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return now, true
	}
	inConfig := map[string]raft.Server{}
	for _, s := range f.Configuration().Servers {
		inConfig[string(s.ID)] = s
	}
	for id, m := range n.members.All() {
		if id == n.cfg.NodeID {
			continue
		}
		srv, in := inConfig[id]
		n.forgetRestarted(id, m)
		switch m.Health {
		case HealthAlive:
			if !in || n.reach.SilentFor(id, now) < n.cfg.NodeDownAfter/2 {
				downed.forget(id)
			}
			addr := m.Meta.GetRaftAddr()
			if addr == "" || (in && string(srv.Address) == addr && srv.Suffrage == raft.Voter) {
				continue
			}
			if _, gone := n.removed.Load(id); gone && !in {
				continue
			}
			if err := n.sec.VerifyPeer(ctx, id, addr); err != nil {
				n.log.Warn("not adding a member whose raft address fails the TLS check", "id", id, "addr", addr, "err", err)
				continue
			}
			soon = true
			n.log.Info("adding voter", "id", id, "addr", addr)
			if err := n.await(ctx, n.group.Raft().AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.LeaderWait)); err != nil {
				n.log.Warn("add voter failed", "id", id, "err", err)
			}
		case HealthLeft:
			soon = soon || in || !downed.isDeclared(id)
			if in {
				n.log.Info("removing a member that left", "id", id)
				if err := n.await(ctx, n.group.Raft().RemoveServer(raft.ServerID(id), 0, n.cfg.LeaderWait)); err != nil {
					n.log.Warn("remove server failed", "id", id, "err", err)
				}
			}
			n.proposeNodeDown(ctx, id, downed)
		case HealthDead:
			dead := now.Sub(m.Since)
			if dead < n.cfg.NodeDownAfter {
				left = min(left, n.cfg.NodeDownAfter-dead)
				continue
			}
			soon = true
			n.proposeNodeDown(ctx, id, downed)
			if !downed.isDeclared(id) {
				left = min(left, n.cfg.NodeDownAfter-dead)
			}
		}
	}
	// Whatever gossip says (it may never have heard of the server, or
	// still think it alive), a server that has answered none of the
	// leader's raft RPCs for NodeDownAfter is down (reach.go).
	members := n.members.All()
	for id := range inConfig {
		if id == n.cfg.NodeID {
			continue
		}
		silent := n.reach.SilentFor(id, now)
		// A server restarted since it went silent releases its previous
		// run itself (clearPastIncarnation) before it takes clients, and
		// raft may reach it only later: its appends back off from the
		// failures of that run. Its silence counts from its restart, or
		// the NodeDown, committed once it is back, would end the new
		// run's connections (the log cannot tell the runs apart).
		m, known := members[id]
		if known && m.Health == HealthAlive && !m.Rebooted.IsZero() {
			silent = min(silent, now.Sub(m.Rebooted))
		}
		if silent < n.cfg.NodeDownAfter {
			left = min(left, n.cfg.NodeDownAfter-silent)
			if silent < n.cfg.NodeDownAfter/2 && (!known || m.Health == HealthAlive) {
				downed.forget(id) // reached again: a later loss counts anew
			}
			continue
		}
		soon = true // declared down: looked at soon, to find it back
		if !downed.isDeclared(id) {
			n.log.Warn("a server has not answered raft for NodeDownAfter", "id", id, "silent", silent.Round(time.Millisecond))
		}
		n.proposeNodeDown(ctx, id, downed)
		if !downed.isDeclared(id) {
			left = min(left, n.cfg.NodeDownAfter-silent)
		}
	}
	return now.Add(left), soon
}

// raiseProtocol proposes SetProtocol when the log's level is below both
// fsm.Protocol and the lowest protocol the servers of the configuration
// announce: from that entry on every replica applies the existing command
// kinds as the new level defines them. A fresh cluster gets there right
// after bootstrap; a rolling upgrade when its last node announces the new
// protocol. It costs a View when the level is already this binary's.
func (n *Node) raiseProtocol(ctx context.Context) {
	var level uint32
	n.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
	if level >= fsm.Protocol {
		return
	}
	target := min(n.clusterProtocol(), fsm.Protocol)
	if target <= level {
		return
	}
	res, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: target}}})
	switch {
	case err != nil:
		n.log.Warn("proposing the protocol level failed", "level", target, "err", err)
	case res.GetCode() != 0:
		// A server's announcement changed between the check and admit;
		// the next round tries again.
		n.log.Warn("protocol level refused", "level", target, "code", res.GetCode(), "text", res.GetText())
	default:
		n.log.Info("raised the log's protocol level", "from", level, "to", target, "index", res.GetIndex())
	}
}

// proposeNodeDown declares id down in the metadata log and in each queue
// group the metadata log names (SubmitGroup: a group this node does not
// run gets it through the group's leader), once each while it stays
// down: a channel of the node may consume from a queue of any group,
// and each group frees what the node's channels held in its own log.
// The metadata log's proposal is waited for; each queue group's goes
// out on its own goroutine and does not hold up the reconcile loop.
func (n *Node) proposeNodeDown(ctx context.Context, id string, downed *downs) {
	cmd := []*proto.Command{{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: id}}}}
	if !downed.isDeclared(id) {
		res, err := n.Submit(ctx, cmd[0])
		if err != nil {
			n.log.Warn("node-down proposal failed", "id", id, "err", err)
			return
		}
		downed.declare(id)
		n.log.Info("declared node down", "id", id, "index", res.GetIndex())
	}
	var gids []string
	n.View(func(m *fsm.Machine) {
		for _, s := range m.QueueGroups() {
			gids = append(gids, s.ID)
		}
	})
	for _, gid := range gids {
		key := groupKey(id, gid)
		epoch, ok := downed.start(id, key)
		if !ok {
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			// A group without a leader gives up after LeaderWait: the
			// next round tries again.
			gctx, cancel := context.WithTimeout(ctx, n.cfg.LeaderWait)
			res, err := n.SubmitGroup(gctx, gid, cmd)
			cancel()
			downed.finish(id, key, epoch, err == nil)
			if err != nil {
				n.log.Warn("node-down proposal failed", "id", id, "group", gid, "err", err)
				return
			}
			n.log.Info("declared node down", "id", id, "group", gid, "index", res[0].GetIndex())
		}()
	}
}
