package cluster

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/links"
	"github.com/raftmq/raftmq/cluster/membership"
	"github.com/raftmq/raftmq/cluster/quorum"
)

// roster is the node's membership: the part that knows who is in the
// cluster and whom this node reaches: the gossip, its member table and the
// remembered peers (package membership), the reach of raft and pings
// (membership.Reach), what the leader gossips raft does not reach
// (membership/liveness.go), the watch over this node's own contact with
// a majority (package quorum), and the servers an operator removed.
type roster struct {
	gossip  *membership.Gossip
	members *membership.Table // gossip.Members()
	// removed holds the servers an operator removed (RemoveNode, shrink),
	// each with the boot its gossip announced then (removedBoot):
	// reconcile adds alive members as voters, and would undo the removal
	// at its next round. The removal holds while the node runs that boot,
	// reachable or not: a node cut off when it was removed and reachable
	// again stays out (it counts itself out, queue_steer.go). Once it has
	// restarted it joins again (forgetRestarted).
	removed sync.Map
	// shrunk holds the nodes an operator shrank out of the queue groups
	// of a log that has them (ShrinkGroups): they stay voters of the
	// metadata group and serve clients, as a node shrunk by
	// rabbitmq-queues does, and the spreads of the queue groups' members
	// leave them out. Kept on the metadata leader with the node's boot,
	// as removed is: it holds until grow, the node's restart, or a new
	// leader.
	shrunk sync.Map

	reach *membership.Reach // whom this node's raft and pings reach
	watch *quorum.Watch     // this node's own contact with a majority (package quorum)
}

// Member health as this node sees it through memberlist.
const (
	// HealthAlive is a member that answers.
	HealthAlive = membership.HealthAlive
	// HealthDead is a member memberlist declared dead (it may come back).
	HealthDead = membership.HealthDead
	// HealthLeft is a member that announced it is leaving, or left.
	HealthLeft = membership.HealthLeft
	// HealthSuspect is a member raft does not reach, whatever gossip says
	// (membership.HealthSuspect).
	HealthSuspect = membership.HealthSuspect
)

// newGossip is the node's gossip (package membership): its addresses and
// keys, its links (Links) under memberlist's traffic, and the node's
// change signal for its events.
func (n *Node) newGossip() *membership.Gossip {
	cfg := &n.cfg
	return membership.New(membership.Config{
		NodeID:            cfg.NodeID,
		DataDir:           cfg.DataDir,
		GossipAddr:        cfg.GossipAddr,
		GossipAdvertise:   cfg.GossipAdvertise,
		GRPCAddr:          cfg.GRPCAddr,
		AMQPAddr:          cfg.AMQPAddr,
		Join:              cfg.Join,
		JoinRetryInterval: cfg.JoinRetryInterval,
		Keys:              cfg.GossipKeys,
		BootMs:            cfg.Clock.Now().UnixMilli(),
		Protocol:          cfg.Protocol,
		Tune:              cfg.Gossip,
		Transport: func(t memberlist.Transport) memberlist.Transport {
			return links.Gossip(t, cfg.Links)
		},
		Logger:           n.log,
		MemberlistLogger: newStdLogger(n.log.With("subsystem", "memberlist")),
		Changed:          n.changed.Signal,
	})
}

// housekeeping runs on every node: it notices that the node got a raft
// configuration and bootstraps the cluster when BootstrapExpect members see
// each other (a node that expects itself alone but was told to join: once
// a seed answered, and no member belongs to a cluster yet).
func (n *Node) housekeeping() {
	defer n.wg.Done()
	tick := time.NewTicker(min(n.cfg.ReconcileInterval, time.Second))
	defer tick.Stop()
	for {
		wait := n.changed.Wait()
		n.checkState()
		n.gossip.SavePeers()
		if !n.gossip.HasState() && (n.cfg.BootstrapExpect > 1 || n.gossip.Joined()) {
			n.maybeBootstrap()
		}
		select {
		case <-wait:
		case <-tick.C:
		case <-n.closing:
			return
		}
	}
}

// checkState sets hasState once the node has a raft configuration.
func (n *Node) checkState() {
	if n.gossip.HasState() {
		return
	}
	f := n.group.Raft().GetConfiguration()
	if f.Error() == nil && len(f.Configuration().Servers) > 0 {
		n.gossip.SetHasState()
	}
}

// maybeBootstrap bootstraps the cluster when BootstrapExpect members are
// alive, none of them belongs to a cluster yet, and this node has the
// lowest id: exactly one node bootstraps, with every member a voter.
func (n *Node) maybeBootstrap() {
	var ids []string
	servers := map[string]string{}
	// The member table, not memberlist.Members(): memberlist replaces the
	// metadata of the nodes it hands out without a lock.
	for id, m := range n.members.All() {
		if m.Health != HealthAlive || m.Meta.GetRaftAddr() == "" {
			continue
		}
		if m.Meta.GetHasState() && id != n.cfg.NodeID {
			return // a cluster exists: its leader adds us
		}
		ids = append(ids, id)
		servers[id] = m.Meta.GetRaftAddr()
	}
	if _, ok := servers[n.cfg.NodeID]; !ok {
		ids = append(ids, n.cfg.NodeID)
		servers[n.cfg.NodeID] = n.advert
	}
	if len(ids) < n.cfg.BootstrapExpect {
		return
	}
	if n.cfg.TLS != nil {
		// Only members whose raft address answers with a certificate naming
		// them count, so a node of another CA is not made a voter.
		ids = slices.DeleteFunc(ids, func(id string) bool {
			if id == n.cfg.NodeID {
				return false
			}
			if err := n.sec.VerifyPeer(context.Background(), id, servers[id]); err != nil {
				n.log.Warn("bootstrap: leaving out a member that fails the TLS check", "id", id, "err", err)
				return true
			}
			return false
		})
		if len(ids) < n.cfg.BootstrapExpect {
			return
		}
	}
	sort.Strings(ids)
	if ids[0] != n.cfg.NodeID {
		return
	}
	cfg := make([]raft.Server, 0, len(ids))
	for _, id := range ids {
		cfg = append(cfg, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(servers[id])})
	}
	if err := n.bootstrap(cfg); err != nil {
		n.log.Error("bootstrap failed", "err", err)
	}
}

// MemberInfo describes one member of the cluster.
type MemberInfo struct {
	ID       string
	RaftAddr string
	GRPCAddr string
	AMQPAddr string
	// Health is alive, suspect (raft does not reach it: HealthSuspect),
	// dead or left ("" when the node is in the raft configuration but was
	// never seen through gossip, and raft has not failed to reach it).
	Health string
	// Suffrage is voter, nonvoter or "" when not in the raft configuration.
	Suffrage string
	Leader   bool
	// Protocol is the command protocol the member announces (0: none
	// heard; the leader counts it as 1).
	Protocol uint32
}

// removedBoot is the boot gossip knows for id, kept with an operator's
// removal of it (0 when gossip has not heard of it, or it is of a
// release that announces none).
func (n *Node) removedBoot(id string) int64 {
	if m, ok := n.members.Get(id); ok {
		return m.Meta.GetBootMs()
	}
	return 0
}

// forgetRestarted forgets an operator's removal (or shrink) of id once
// its member m announces another boot than the one it ran when removed:
// the node was restarted, and joins again. A node without a known boot
// is forgotten as soon as gossip no longer sees it alive (it may be
// restarting).
func (n *Node) forgetRestarted(id string, m membership.Member) {
	for _, held := range []*sync.Map{&n.removed, &n.shrunk} {
		v, ok := held.Load(id)
		if !ok {
			continue
		}
		boot, now := v.(int64), m.Meta.GetBootMs()
		known := boot != 0 && now != 0
		if known && now != boot || !known && m.Health != HealthAlive {
			held.Delete(id)
		}
	}
}

// Members lists the gossip members and the raft configuration's servers,
// sorted by id.
func (n *Node) Members() []MemberInfo {
	byID := map[string]*MemberInfo{}
	suspect := n.suspects()
	for id, m := range n.members.All() {
		h := m.Health
		if h == HealthAlive && suspect[id] {
			h = HealthSuspect
		}
		byID[id] = &MemberInfo{ID: id, RaftAddr: m.Meta.GetRaftAddr(), GRPCAddr: m.Meta.GetGrpcAddr(),
			AMQPAddr: m.Meta.GetAmqpAddr(), Health: h, Protocol: m.Meta.GetProtocol()}
	}
	self := n.gossip.LocalMeta()
	byID[self.Id] = &MemberInfo{ID: self.Id, RaftAddr: self.RaftAddr, GRPCAddr: self.GrpcAddr, AMQPAddr: self.AmqpAddr, Health: HealthAlive,
		Protocol: self.Protocol}
	if f := n.group.Raft().GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			mi, ok := byID[string(s.ID)]
			if !ok {
				mi = &MemberInfo{ID: string(s.ID), RaftAddr: string(s.Address)}
				if suspect[mi.ID] {
					mi.Health = HealthSuspect
				}
				byID[string(s.ID)] = mi
			}
			if s.Suffrage == raft.Voter {
				mi.Suffrage = "voter"
			} else {
				mi.Suffrage = "nonvoter"
			}
		}
	}
	leaderID, _ := n.Leader()
	out := make([]MemberInfo, 0, len(byID))
	for _, mi := range byID {
		mi.Leader = mi.ID == leaderID
		out = append(out, *mi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
