package cluster

import (
	"context"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/clock"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// newTime is the node's time (package clock) over its view of the
// cluster: the voters of its raft configuration, the members it can call,
// its leadership.
func (n *Node) newTime() *clock.Time {
	cfg := &n.cfg
	return clock.New(clock.Config{
		Self:           cfg.NodeID,
		Clock:          cfg.Clock,
		MaxOffset:      cfg.MaxClockOffset,
		SampleInterval: cfg.ClockSampleInterval,
		LeaderWait:     cfg.LeaderWait,
		Logger:         n.log,
		Voters: func() ([]string, bool) {
			f := n.group.Raft().GetConfiguration()
			if f.Error() != nil {
				return nil, false
			}
			var voters []string
			for _, s := range f.Configuration().Servers {
				if s.Suffrage == raft.Voter {
					voters = append(voters, string(s.ID))
				}
			}
			return voters, true
		},
		Peer: func(id string) (proto.InternalClient, bool) {
			m, ok := n.members.Get(id)
			if !ok || m.Health != HealthAlive || m.Meta.GetGrpcAddr() == "" {
				return nil, false
			}
			conn, err := n.replyConns.conn(n, id, m.Meta.GetGrpcAddr())
			if err != nil {
				return nil, false
			}
			return proto.NewInternalClient(conn), true
		},
		Leading: func() bool { return n.lead.Load() != nil },
		HandOver: func(id string) error {
			addr := ""
			for _, s := range n.servers() {
				if string(s.ID) == id {
					addr = string(s.Address)
				}
			}
			return n.group.TransferLeadership(raft.ServerID(id), raft.ServerAddress(addr)).Error()
		},
	})
}

// clockLoop reads the voters' clocks until the node closes (clock.Time.Run).
func (n *Node) clockLoop() {
	defer n.wg.Done()
	ctx, cancel := n.untilClosed(context.Background())
	defer cancel()
	n.clocks.Run(ctx)
}

// ClockProblem says why this node's wall clock is unfit to lead (it is
// further from the quorum's than MaxClockOffset), "" when it is fine or
// no quorum of clocks has been read.
func (n *Node) ClockProblem() string { return n.clocks.Problem() }

// Clock implements proto.InternalServer: this node's wall clock, for the
// callers' quorum clock (package clock). Its callers are checked by
// registerInternal.
func (fs *forwardServer) Clock(context.Context, *proto.ClockRequest) (*proto.ClockReading, error) {
	return &proto.ClockReading{WallUnixNanos: fs.n.cfg.Clock.Now().UnixNano()}, nil
}

// logClock is the state machine's clock: the latest stamp in the log.
func (n *Node) logClock() int64 {
	var clock int64
	n.View(func(m *fsm.Machine) { clock = m.Clock() })
	return clock
}
