package cluster

import (
	"time"

	"context"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/quorum"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// newQuorumWatch is the node's pause-minority watch (package quorum):
// its raft and reach, the voters' addresses from gossip and the pings,
// the fence it commits through Submit, the state it flushes under, and
// the sinks it gates and pauses.
func (n *Node) newQuorumWatch() *quorum.Watch {
	cfg := &n.cfg
	return quorum.New(quorum.Config{
		NodeID:           cfg.NodeID,
		NodeDownAfter:    cfg.NodeDownAfter,
		HeartbeatTimeout: cfg.HeartbeatTimeout,
		ElectionTimeout:  cfg.ElectionTimeout,
		LeaderWait:       cfg.LeaderWait,
		Logger:           n.log,
		Raft:             watchedRaft{n},
		Reach:            n.reach,
		Addr: func(id string) string {
			m, ok := n.members.Get(id)
			if !ok {
				return ""
			}
			return m.Meta.GetGrpcAddr()
		},
		Ping: n.pingPeer,
		Fence: func(ctx context.Context) error {
			_, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
			return err
		},
		State: stateLock{n},
		Unacked: func(d *fsm.Delivery) bool {
			return len(n.group.State().Machine().Unacked(d.Consumer.GetChannel(), []uint64{d.DeliveryTag})) > 0
		},
		Effects: cfg.Effects,
		Pauser:  cfg.Pauser,
	})
}

// watchedRaft is the node's raft as the quorum watch reads it; the group
// is opened after the watch is made.
type watchedRaft struct{ n *Node }

// Voters returns the voters of the latest raft configuration and
// whether this node is one.
func (r watchedRaft) Voters() (ids []string, self bool) {
	f := r.n.group.Raft().GetConfiguration()
	if f.Error() != nil {
		return nil, false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		ids = append(ids, string(s.ID))
		self = self || string(s.ID) == r.n.cfg.NodeID
	}
	return ids, self
}

func (r watchedRaft) LastContact() time.Time { return r.n.group.Raft().LastContact() }
func (r watchedRaft) Leading() bool          { return r.n.group.Raft().State() == raft.Leader }

// stateLock is the group's state lock, opened after the watch is made.
type stateLock struct{ n *Node }

func (l stateLock) Lock()   { l.n.group.State().Lock() }
func (l stateLock) Unlock() { l.n.group.State().Unlock() }

// watchQuorum runs the watch until the node closes.
func (n *Node) watchQuorum() {
	defer n.wg.Done()
	n.watch.Run(n.closing)
}

// checkStall is the apply path's stall check (quorum.Watch.CheckStall).
func (n *Node) checkStall() {
	if n.watch != nil {
		n.watch.CheckStall()
	}
}

// Isolated reports whether this node is cut off from a majority of the
// cluster (its clients are refused), and why.
func (n *Node) Isolated() (bool, string) { return n.watch.Isolated() }

// Refusing reports why this node does not take clients now, "" when it
// does (quorum.Watch.Refusing).
func (n *Node) Refusing() string {
	if n.watch == nil {
		return ""
	}
	return n.watch.Refusing()
}
