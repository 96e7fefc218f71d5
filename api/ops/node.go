package ops

import (
	"context"
	"log/slog"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/procstat"
	"github.com/raftmq/raftmq/proto"
)

// Node is what the operations and the health checks need from a cluster
// node. A *cluster.Node is adapted to it by the binary's wiring.
type Node interface {
	// NodeID is this node's id.
	NodeID() string
	// IsLeader reports whether this node is the raft leader.
	IsLeader() bool
	// Leader returns the current leader's id and raft address ("" when none
	// is known).
	Leader() (id, addr string)
	// Submit proposes one command through the log and returns its result
	// once this node has applied it.
	Submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error)
	// View runs fn on the applied state under the node's lock. fn must not
	// keep s after it returns.
	View(fn func(s State))
	// LocalView runs fn on the state as this node holds it, under its
	// lock: the metadata and the queue groups this node runs. It asks no
	// other node, so it answers at once whatever the cluster's state; a
	// queue of a group this node does not run shows only the metadata's
	// record of it. It serves what the metadata answers (users,
	// permissions, vhosts, exchanges, readiness), which every login
	// and health check reads.
	LocalView(fn func(s State))
	// RaftStats returns raft's view of this node.
	RaftStats() RaftStats
	// Members lists the cluster's members as memberlist and the raft
	// configuration see them.
	Members() []*proto.NodeStatus
	// TransferLeadership hands leadership to the node id ("" lets raft
	// choose). Only the leader can do it.
	TransferLeadership(ctx context.Context, id string) error
	// RemoveNode removes a node from the raft configuration. Only the leader
	// can do it.
	RemoveNode(ctx context.Context, id string) error
	// Groups lists the Raft groups this node knows, by id (a queue's
	// QueueInfo.RaftGroup names the one that holds it): those it runs,
	// then those it does not (Far: members from the log, the leader
	// from gossip, no raft figures).
	Groups() []GroupStatus
	// GroupDigest is the digest and applied index of queue group id's
	// state as this node applied it; false for a group it does not run.
	GroupDigest(id string) (digest [32]byte, applied uint64, ok bool)
	// GrowGroups, ShrinkGroups and RebalanceGroups are rabbitmq-queues
	// grow, shrink and rebalance over the groups (cluster.Node's).
	GrowGroups(ctx context.Context, id string, even bool) ([]GroupChange, error)
	ShrinkGroups(ctx context.Context, id string) ([]GroupChange, error)
	RebalanceGroups(ctx context.Context) (map[string]int, error)
}

// GroupStatus, GroupMember and GroupChange are the cluster's: the
// surfaces read the groups as the node knows them.
type (
	GroupStatus = cluster.GroupStatus
	GroupMember = cluster.GroupMember
	GroupChange = cluster.GroupChange
)

// ConsistentViewer is implemented by a Node that can run a read after
// confirming it is still the leader (a raft barrier or leadership check).
// A leader serving a consistent read uses it when available.
type ConsistentViewer interface {
	ConsistentView(ctx context.Context, fn func(s State)) error
}

// ClientRefuser is implemented by a Node that can stop taking clients
// while it is up (cut off from a majority of the cluster, or just resumed
// from a pause): Refusing says why, "" while it takes them.
type ClientRefuser interface {
	Refusing() string
}

// ClockChecker is implemented by a Node that checks its wall clock
// against the voters': ClockProblem says why the clock is unfit to lead
// (further from the quorum's than --max-clock-offset), "" when it is fine.
type ClockChecker interface {
	ClockProblem() string
}

// ClockProblem is n's ClockProblem, "" for a Node that does not check.
func ClockProblem(n Node) string {
	if c, ok := n.(ClockChecker); ok {
		return c.ClockProblem()
	}
	return ""
}

// RaftStats is raft's state on one node.
type RaftStats struct {
	// State is "Leader", "Follower", "Candidate" or "Shutdown".
	State        string
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	LastLogIndex uint64
	// LogSizeBytes is the size of the on-disk log; 0 when unknown.
	LogSizeBytes int64
}

// State is the read side of the replicated state machine (*fsm.Machine).
type State interface {
	Queues(vhost string) []*proto.QueueInfo
	Queue(vhost, name string) (*proto.QueueInfo, bool)
	Exchanges(vhost string) []*proto.ExchangeInfo
	Bindings(vhost string) []*proto.BindingInfo
	Consumers(vhost string) []*proto.ConsumerInfo
	Policies(vhost string, operator bool) []*proto.PolicyInfo
	Users() []*proto.UserInfo
	Permissions() []*proto.PermissionInfo
	Vhosts() []*proto.VhostInfo
	// VhostLimits lists the limits of vhost ("" every vhost), for the
	// vhosts that have some.
	VhostLimits(vhost string) []*proto.VhostLimitsInfo
	Digest() [32]byte
	AppliedIndex() uint64
	Clock() int64
	// Initialized reports whether the leader's defaults (the default vhost
	// and user) have been applied.
	Initialized() bool
	// Stats are the machine's cumulative counters and gauges.
	Stats() fsm.Stats
	// QueueCounts are each queue's cumulative message counters.
	QueueCounts() []fsm.QueueCounts
	// Delayed lists up to limit messages waiting in delayed exchanges,
	// earliest due first ("" selects every vhost or exchange).
	Delayed(vhost, exchange string, limit int) []*proto.DelayedMessageInfo
	// Releases count the delayed messages released and their lateness.
	Releases() fsm.ReleaseStats
	UserCredentials
}

// UserCredentials is implemented by a State that can return a user's stored
// password hash; SetUserTags needs it to rewrite a user without changing
// its password.
type UserCredentials interface {
	UserPasswordHash(name string) (hash []byte, algorithm string, ok bool)
}

// Connections is this node's AMQP server as the admin service sees it.
type Connections interface {
	// List returns this node's client connections.
	List() []*proto.ConnectionInfo
	// Close closes the connection id with a connection.close carrying
	// reason; false when there is no such connection.
	Close(id, reason string) bool
}

// Peers gives Admin clients of other nodes by gRPC address.
type Peers interface {
	Admin(addr string) (proto.AdminClient, error)
}

// StateStats are the state machine's cumulative counters and gauges, read at
// scrape time.
type StateStats struct {
	Published      uint64
	Routed         uint64 // queue copies enqueued by publishes
	Delivered      uint64
	Acked          uint64
	Expired        uint64
	DeadLettered   uint64
	Dropped        uint64
	Ready          uint64
	Unacked        uint64
	Overdue        uint64
	Consumers      uint64
	Queues         uint64
	ReadyBytes     uint64
	LeaseDueQueues uint64
	// Deaths are fsm.Stats.Deaths: by reason (fsm.DeathReasons), without
	// and with a dead-letter exchange.
	Deaths [4][2]uint64
	// Delayed counts the messages waiting in delayed exchanges.
	Delayed uint64
	// Releases are fsm.Machine.Releases.
	Releases fsm.ReleaseStats
}

// Deps are the operations' collaborators.
type Deps struct {
	// Node is the local cluster node (required).
	Node Node
	// Conns is the local AMQP server; nil when it is not running.
	Conns Connections
	// Peers dials other nodes' Admin services; nil uses a pool with
	// insecure transport credentials.
	Peers Peers
	// Counters reads this node's own AMQP counters; nil reads zeros.
	Counters func() NodeCounters
	// Resources reads this node's resource alarms; nil reports none.
	Resources func() Resources
	// Environment lists this node's settings for rabbitmqctl environment,
	// secrets withheld; nil lists none.
	Environment func() []*proto.Setting
	// Intercept gives a message published here (Publish) what this
	// node's incoming message interceptors give an AMQP publish; nil
	// leaves it as it is.
	Intercept func(*proto.Properties) (*proto.Properties, error)
	// PeerTimeout bounds each call fanned out to a peer (default 2s).
	PeerTimeout time.Duration
	// LeaderWait bounds how long a call for the leader waits while no
	// leader is known, an election under way (default 5s; the call's
	// own deadline when sooner).
	LeaderWait time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Resources are a node's resource alarms and what the disk alarm
// compares, as /api/nodes, the alarm health checks and the metrics show
// them.
type Resources struct {
	MemAlarm  bool
	DiskAlarm bool
	// DiskFree is the free space of the data dir at the last check (0
	// before it), DiskFreeLimit the --disk-free-limit.
	DiskFree, DiskFreeLimit uint64
	// MemLimit is the memory alarm's limit (--vm-memory-high-watermark).
	MemLimit uint64
	// MemLimitRelative is the fraction of the memory available MemLimit
	// was computed from; 0 when it was given in bytes.
	MemLimitRelative float64
	// MemUsed is the process's resident memory at the memory alarm's
	// last check (0 before it, or without an alarm): what the alarm
	// compared with MemLimit.
	MemUsed uint64
}

// MemoryUsed is the memory figure every surface shows: the one the memory
// alarm last compared, so that the figure an operator reads is at or
// above the limit exactly when the alarm is raised; before the alarm's
// first check, or on a node without one, the process's resident memory
// read now (the same measure).
func (r Resources) MemoryUsed() uint64 {
	if r.MemUsed > 0 {
		return r.MemUsed
	}
	return procstat.ResidentMemory()
}

// Alarms names the raised alarms as the admin API reports them.
func (r Resources) Alarms() []string {
	var out []string
	if r.DiskAlarm {
		out = append(out, "disk")
	}
	if r.MemAlarm {
		out = append(out, "memory")
	}
	return out
}

// NodeCounters are this node's own cumulative counts of its AMQP clients
// (amqp.Counters): RabbitMQ counts them per node too, and the replicated
// state does not see them.
type NodeCounters struct {
	ConnectionsOpened, ConnectionsClosed uint64
	ChannelsOpened, ChannelsClosed       uint64
	Confirmed                            uint64
	Returned, Dropped                    uint64
	GetEmpty                             uint64
	QueuesDeclared                       uint64
	CreditRaised, CreditLowered          uint64
}
