package cluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

// metaVersion is the NodeMeta format this node gossips.
const metaVersion = 1

// membership is the node's part that knows who is in the cluster and
// whom this node reaches: gossip and the member table (gossip.go), the
// remembered peers (peers.go), the reach of raft and pings (reach.go),
// what the leader gossips raft does not reach (liveness.go), the watch
// over this node's own contact with a majority (quorum.go), and the
// servers an operator removed.
type membership struct {
	list       *memberlist.Memberlist
	gossipAddr string // advertised gossip address
	members    *memberTable
	// removed holds the servers an operator removed (RemoveNode) while
	// they were alive: reconcile adds alive members as voters, and would
	// undo the removal at its next round. An id is forgotten once gossip
	// no longer sees the member alive, so a node that comes back joins.
	removed sync.Map

	peersMu sync.Mutex
	peers   []string // remembered gossip addresses of the other members (peers.go)

	reach    *reach       // whom this node's raft and pings reach (reach.go)
	watch    *quorumWatch // this node's own contact with a majority (quorum.go)
	hasState atomic.Bool
	leaving  atomic.Bool
	// gossipedUnreachable is what the leader gossips raft does not reach
	// (liveness.go).
	gossipedUnreachable atomic.Pointer[[]string]

	bootMs int64 // when this run started (unix ms), gossiped
	// protocol is the command protocol this node announces
	// (Config.Protocol; tests change it).
	protocol atomic.Uint32
}

// Member health as this node sees it through memberlist.
const (
	// HealthAlive is a member that answers.
	HealthAlive = "alive"
	// HealthDead is a member memberlist declared dead (it may come back).
	HealthDead = "dead"
	// HealthLeft is a member that announced it is leaving, or left.
	HealthLeft = "left"
)

type member struct {
	meta   *proto.NodeMeta
	addr   string // gossip address
	health string
	since  time.Time // when health last changed
}

// memberTable is this node's view of the gossip members, fed by memberlist
// events (memberlist itself forgets dead members).
type memberTable struct {
	mu sync.Mutex
	m  map[string]*member
}

func newMemberTable() *memberTable { return &memberTable{m: map[string]*member{}} }

func (t *memberTable) get(id string) (member, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.m[id]
	if !ok {
		return member{}, false
	}
	return *m, true
}

func (t *memberTable) all() map[string]member {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]member, len(t.m))
	for id, m := range t.m {
		out[id] = *m
	}
	return out
}

func (t *memberTable) set(n *memberlist.Node, health string) {
	meta := &proto.NodeMeta{}
	if err := gproto.Unmarshal(n.Meta, meta); err != nil || meta.GetId() == "" {
		meta = &proto.NodeMeta{Id: n.Name}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.m[n.Name]
	// memberlist does not say whether a member left or died: a member that
	// announced it is leaving has left.
	if meta.GetLeaving() || (health == HealthDead && ok && old.meta.GetLeaving()) {
		health = HealthLeft
	}
	if ok && old.health == health {
		old.meta, old.addr = meta, n.Address()
		return
	}
	t.m[n.Name] = &member{meta: meta, addr: n.Address(), health: health, since: time.Now()}
}

// gossipDelegate gives memberlist this node's metadata and feeds its events
// into the member table.
type gossipDelegate struct{ n *Node }

func (d gossipDelegate) NodeMeta(limit int) []byte {
	meta := d.n.localMeta()
	b, _ := gproto.Marshal(meta)
	if len(b) > limit && len(meta.Unreachable) > 0 {
		// What raft reaches is a hint the others can do without.
		meta.Unreachable = nil
		b, _ = gproto.Marshal(meta)
	}
	if len(b) > limit {
		d.n.log.Error("node metadata exceeds the gossip limit", "size", len(b), "limit", limit)
		return nil
	}
	return b
}
func (gossipDelegate) NotifyMsg([]byte)                {}
func (gossipDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (gossipDelegate) LocalState(bool) []byte          { return nil }
func (gossipDelegate) MergeRemoteState([]byte, bool)   {}

func (d gossipDelegate) NotifyJoin(m *memberlist.Node) {
	d.n.members.set(m, HealthAlive)
	d.n.changed.Signal()
}

func (d gossipDelegate) NotifyLeave(m *memberlist.Node) {
	d.n.members.set(m, HealthDead)
	d.n.changed.Signal()
}

func (d gossipDelegate) NotifyUpdate(m *memberlist.Node) {
	d.n.members.set(m, HealthAlive)
	d.n.changed.Signal()
}

func (n *Node) localMeta() *proto.NodeMeta {
	return &proto.NodeMeta{
		Version:  metaVersion,
		Id:       n.cfg.NodeID,
		RaftAddr: n.advert,
		GrpcAddr: n.cfg.GRPCAddr,
		AmqpAddr: n.cfg.AMQPAddr,
		HasState: n.hasState.Load(),
		Leaving:  n.leaving.Load(),
		BootMs:   n.bootMs,
		Protocol: n.protocol.Load(),
		Unreachable: func() []string {
			if p := n.gossipedUnreachable.Load(); p != nil {
				return *p
			}
			return nil
		}(),
	}
}

func (n *Node) startGossip() error {
	host, portS, err := net.SplitHostPort(n.cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("cluster: gossip address %q: %w", n.cfg.GossipAddr, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return fmt.Errorf("cluster: gossip port %q: %w", portS, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	glog := newStdLogger(n.log.With("subsystem", "memberlist"))
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{host},
		BindPort:  port,
		Logger:    glog,
	})
	if err != nil {
		return fmt.Errorf("cluster: gossip listen: %w", err)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = n.cfg.NodeID
	mc.BindAddr = host
	mc.BindPort = nt.GetAutoBindPort()
	if n.cfg.GossipAdvertise != "" {
		ah, ap, err := net.SplitHostPort(n.cfg.GossipAdvertise)
		if err != nil {
			_ = nt.Shutdown()
			return fmt.Errorf("cluster: gossip advertise %q: %w", n.cfg.GossipAdvertise, err)
		}
		mc.AdvertiseAddr = ah
		mc.AdvertisePort, _ = strconv.Atoi(ap)
	}
	mc.Transport = &gossipTransport{Transport: nt, links: n.cfg.Links}
	mc.Logger = glog
	d := gossipDelegate{n: n}
	mc.Delegate = d
	mc.Events = d
	if len(n.cfg.GossipKeys) > 0 {
		kr, err := memberlist.NewKeyring(n.cfg.GossipKeys, n.cfg.GossipKeys[0])
		if err != nil {
			_ = nt.Shutdown()
			return fmt.Errorf("cluster: gossip keyring: %w", err)
		}
		mc.Keyring = kr
		// Refuse plain packets and streams, and send none: a node without
		// the key neither joins nor hears the members.
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	if n.cfg.Gossip != nil {
		n.cfg.Gossip(mc)
	}
	list, err := memberlist.Create(mc)
	if err != nil {
		_ = nt.Shutdown()
		return fmt.Errorf("cluster: start gossip: %w", err)
	}
	n.list = list
	// Read once now: memberlist updates its local node without a lock later.
	n.gossipAddr = list.LocalNode().Address()
	return nil
}

// gossipTransport routes memberlist's traffic through Links.
type gossipTransport struct {
	memberlist.Transport
	links *Links
}

func (t *gossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if !t.links.Allowed(addr) {
		return time.Now(), nil // dropped on the floor, like a lost packet
	}
	return t.Transport.WriteTo(b, addr)
}

func (t *gossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if !t.links.Allowed(addr) {
		return nil, errLinkDown
	}
	c, err := t.Transport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return t.links.track(c, addr)
}

// joinLoop joins the seeds, retrying until one answers, and joins them
// again whenever this node finds itself alone (after a long partition
// memberlist forgets the members it declared dead).
func (n *Node) joinLoop() {
	defer n.wg.Done()
	joined := false
	for {
		if seeds := n.joinSeeds(); n.list.NumMembers() <= 1 && len(seeds) > 0 {
			k, err := n.list.Join(seeds)
			switch {
			case k > 0 && !joined:
				n.log.Info("joined the cluster", "seeds_answered", k)
			case k > 0:
				n.log.Info("re-joined the cluster", "seeds_answered", k)
			default:
				n.log.Debug("join failed, retrying", "err", err)
			}
			joined = joined || k > 0
		}
		t := time.NewTimer(n.cfg.JoinRetryInterval)
		select {
		case <-t.C:
		case <-n.closing:
			t.Stop()
			return
		}
	}
}

// setHasState records that this node belongs to a cluster and gossips it.
func (n *Node) setHasState() {
	if n.hasState.Swap(true) {
		return
	}
	if n.list != nil {
		if err := n.list.UpdateNode(time.Second); err != nil {
			n.log.Debug("gossip update", "err", err)
		}
	}
}

// housekeeping runs on every node: it notices that the node got a raft
// configuration and bootstraps the cluster when BootstrapExpect members see
// each other.
func (n *Node) housekeeping() {
	defer n.wg.Done()
	tick := time.NewTicker(min(n.cfg.ReconcileInterval, time.Second))
	defer tick.Stop()
	for {
		wait := n.changed.Wait()
		n.checkState()
		n.savePeers()
		if !n.hasState.Load() && n.cfg.BootstrapExpect > 1 {
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
	if n.hasState.Load() {
		return
	}
	f := n.group.Raft().GetConfiguration()
	if f.Error() == nil && len(f.Configuration().Servers) > 0 {
		n.setHasState()
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
	for id, m := range n.members.all() {
		if m.health != HealthAlive || m.meta.GetRaftAddr() == "" {
			continue
		}
		if m.meta.GetHasState() && id != n.cfg.NodeID {
			return // a cluster exists: its leader adds us
		}
		ids = append(ids, id)
		servers[id] = m.meta.GetRaftAddr()
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
	// Health is alive, suspect (raft does not reach it: liveness.go),
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

// Members lists the gossip members and the raft configuration's servers,
// sorted by id.
func (n *Node) Members() []MemberInfo {
	byID := map[string]*MemberInfo{}
	suspect := n.suspects()
	for id, m := range n.members.all() {
		h := m.health
		if h == HealthAlive && suspect[id] {
			h = HealthSuspect
		}
		byID[id] = &MemberInfo{ID: id, RaftAddr: m.meta.GetRaftAddr(), GRPCAddr: m.meta.GetGrpcAddr(),
			AMQPAddr: m.meta.GetAmqpAddr(), Health: h, Protocol: m.meta.GetProtocol()}
	}
	self := n.localMeta()
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
