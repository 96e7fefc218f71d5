package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/raftmq/raftmq/cluster/clock"
	"github.com/raftmq/raftmq/cluster/linksec"
	"github.com/raftmq/raftmq/fsm"
	"google.golang.org/grpc"
)

// Config is what a node is started with, grouped by the part of the node
// that takes it. Addresses are host:port.
type Config struct {
	// NodeID is the node's id, unique in the cluster and stable across
	// restarts (it is the raft server id and the memberlist name).
	NodeID string
	// DataDir holds the raft log and stable store, and the snapshots.
	DataDir string
	// GRPCServer receives the internal Forward service; the caller serves it
	// (after Start returns). Forwarded requests carry whole messages: the
	// server must accept messages as large as the largest publish
	// (grpc.MaxRecvMsgSize and grpc.MaxSendMsgSize).
	GRPCServer *grpc.Server
	// Logger receives the node's logs (default: slog.Default()).
	Logger *slog.Logger
	// Protocol is the command protocol this node announces (default and
	// upper bound fsm.Protocol). Only tests set it lower: such a node
	// stands for one of an earlier release during a rolling upgrade, and
	// holds back new command kinds and the log's protocol level.
	Protocol uint32

	// Each part of the node takes its own part of the configuration; their
	// fields read as the Config's own (cfg.HeartbeatTimeout).
	Sinks
	GroupConfig
	MembershipConfig
	SecurityConfig
	TimeConfig
	DutyConfig
}

// GroupConfig is what the node gives its Raft group (package group): where its
// log lives, its transport address, raft's timings and snapshots, and the
// bounds of the group commit. Zero values mean production defaults.
type GroupConfig struct {
	// LogStore is the raft log and stable store: LogStoreWAL, LogStoreBolt
	// or LogStoreAuto (default: what DataDir already holds, else the WAL).
	LogStore string
	// RaftAddr is the raft transport listen address; RaftAdvertise the
	// address peers dial (default: RaftAddr, or the first private IP when
	// RaftAddr has no host).
	RaftAddr      string
	RaftAdvertise string
	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout tune raft
	// (defaults 1 s, 1 s, 500 ms).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long raft waits before replicating an idle
	// commit index to followers, which bounds follower apply lag under light
	// load (default 2 ms: about 3 ms of lag; raft allows 1 ms at least).
	// A group idle for a second no longer sends these repeats
	// (group.QuietAppends): an idle group costs its heartbeats only.
	CommitTimeout time.Duration
	// SnapshotThreshold, SnapshotInterval and TrailingLogs tune raft
	// snapshots (defaults 8192 entries, 30 s, 10240 entries). Left at its
	// default, the entry threshold grows with the messages the state
	// holds (snapthreshold.go); a value set here is kept as it is.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// SnapshotBytes also snapshots once this many bytes of entries were
	// appended to the log since the last snapshot (or the last attempt),
	// whatever their count: message bodies live in the entries, so a few
	// thousand of them can be gigabytes, all read again at restart
	// (default DefaultSnapshotBytes; negative: by entry count alone).
	SnapshotBytes int64
	// scaleSnapshotThreshold: SnapshotThreshold was left at its default
	// (group.Config.ScaleSnapshotThreshold).
	scaleSnapshotThreshold bool
	// inlineMax is group.StorageOptions.InlineMax (tests).
	inlineMax int
	// LeaderWait bounds how long Submit waits for a leader when its context
	// has no deadline (default 10 s).
	LeaderWait time.Duration
	// MaxBatchCommands and MaxBatchBytes bound one log entry built by group
	// commit (defaults 1024 commands, 1 MiB; a larger single request still
	// goes alone into one entry).
	MaxBatchCommands int
	MaxBatchBytes    int
	// MaxMessageSize is the largest publish body the leader lets into the
	// log (default and upper bound fsm.MaxBodySize); a larger one is
	// refused to its publisher alone.
	MaxMessageSize int
	// MaxInflightEntries bounds the entries the leader has handed to raft
	// and not yet seen applied (default 4): while they are in flight, new
	// commands accumulate into the next, larger entry.
	MaxInflightEntries int
	// QueueGroups is how many queue groups the cluster runs besides its
	// metadata group (0 to fsm.MaxQueueGroups; default 0: none). The
	// metadata leader's value counts: it creates those the log does not
	// hold yet, once every server announces the protocol level that
	// knows them; a group once created stays (queue_groups.go).
	QueueGroups int
	// QueueGroupsPerNode raises QueueGroups to one queue group per voter
	// of the metadata group, and at least MinQueueGroupsPerNode: a
	// cluster grown to more nodes gets a group for each, so that every
	// node leads one and is a member of three (DESIGN.md decision 1).
	// Groups created stay when nodes leave, as QueueGroups' do.
	QueueGroupsPerNode bool
	// PlaceQueues places new queues into the queue groups (placement.go):
	// the metadata leader switches it on in the log once queue groups
	// exist and every server announces the level that knows it. Until a
	// node that is no member of a queue's group can serve it, this is for
	// clusters whose every node is a member of every group (3 nodes).
	PlaceQueues bool
	// LeadershipBalanceAfter is how long a queue group's leader must
	// have led it, and the member meant to lead it been online, before
	// the leadership is handed back to that member; also the least time
	// between two hand-overs of one group (default
	// DefaultLeadershipBalanceAfter; queue_steer.go).
	LeadershipBalanceAfter time.Duration
	// PlaceGrace is how long a queue group leader's mirror leaves a queue
	// just placed in its group to the node that declared it, where every
	// node is a member of the group (default DefaultPlaceGrace;
	// placement.go).
	PlaceGrace time.Duration
}

// DefaultPlaceGrace is PlaceGrace's default: well past the time a
// declaring member takes from its metadata commit to placing the queue,
// and short for a queue whose declaring node died between the two.
const DefaultPlaceGrace = 100 * time.Millisecond

// DefaultLeadershipBalanceAfter is LeadershipBalanceAfter's default: long
// enough that a node which restarts or flaps does not pull leaderships
// back and forth, short enough that a node back from a restart leads
// its share within a minute.
const DefaultLeadershipBalanceAfter = 30 * time.Second

// MembershipConfig is the node's membership: the addresses it gossips, whom
// it joins, how it bootstraps, and when a member counts as down. Zero
// values mean production defaults.
type MembershipConfig struct {
	// GRPCAddr and AMQPAddr are the gRPC and AMQP addresses advertised to
	// peers (the caller serves them).
	GRPCAddr string
	AMQPAddr string
	// GossipAddr is the memberlist listen address (TCP and UDP);
	// GossipAdvertise the address peers use (default: derived by memberlist).
	GossipAddr      string
	GossipAdvertise string
	// Join lists gossip addresses of nodes to join; the node retries until
	// one answers.
	Join []string
	// BootstrapExpect is the number of nodes that must see each other before
	// the cluster bootstraps (default 1: a lone node bootstraps at once).
	BootstrapExpect int
	// NodeDownAfter is how long a member stays dead in gossip, or a server
	// unreached by the leader's raft, before the leader proposes NodeDown
	// for it (default DefaultNodeDownAfter, or LeastDownAfter when that
	// is longer); at least LeastDownAfter.
	NodeDownAfter time.Duration
	// ReconcileInterval is how often the leader reconciles members with the
	// raft configuration, besides member events (default 5 s).
	ReconcileInterval time.Duration
	// JoinRetryInterval is the pause between join attempts (default 1 s).
	JoinRetryInterval time.Duration
	// Gossip adjusts the memberlist configuration (tests tighten timings).
	Gossip func(*memberlist.Config)
	// Links cuts links for fault-injection tests (nil: no faults).
	Links *Links
}

// SecurityConfig secures the links between nodes.
type SecurityConfig struct {
	// TLS, when set, secures the links between nodes with mutual TLS: the
	// raft transport and the forwarding client, and the internal service
	// takes only calls with a node certificate. The caller's gRPC server
	// must use the same TLS (ServerOptions(tls)). It comes from an
	// operator's CA (linksec.LoadTLS, linksec.NewTLS) or from the cluster
	// secret (linksec.SecretTLS). Nil: plain TCP, open to anyone who reaches the ports,
	// for in-process tests only (the raftmq command never runs so).
	TLS *linksec.TLS
	// GossipKeys, when set, encrypt and authenticate gossip with
	// memberlist's keyring (AES-GCM; 16, 24 or 32 bytes each): the first
	// key encrypts, every key decrypts, and a packet no key opens is
	// dropped, so a node without a key cannot join. Nil: plain gossip.
	GossipKeys [][]byte
}

// TimeConfig is the node's time: the clock it stamps the log with and
// the watch over the voters' clocks (package clock).
type TimeConfig struct {
	// Clock stamps the log and drives the leader's schedulers (default: the
	// wall clock).
	Clock clock.Clock
	// MaxClockOffset is how far this node's wall clock may be from the
	// quorum's before it refuses to lead (default DefaultMaxClockOffset).
	MaxClockOffset time.Duration
	// ClockSampleInterval is how often the node reads the voters' clocks
	// (default 1 s).
	ClockSampleInterval time.Duration
}

// DutyConfig is for the leader's duties (leader.go, due.go): the first user it
// creates and the consumer timeout it proposes.
type DutyConfig struct {
	// DefaultUser and DefaultPassword are the user the first leader creates
	// in a new cluster (default guest/guest).
	DefaultUser     string
	DefaultPassword string
	// ConsumerTimeout is how long a delivery may stay unacknowledged before
	// its channel is closed, for queues that set no x-consumer-timeout nor
	// consumer-timeout policy (default fsm.DefaultConsumerTimeout, 30
	// minutes; negative: none). The leader's value applies: it is written
	// into each ConsumerTimeout it proposes.
	ConsumerTimeout time.Duration
}

func (c *Config) setDefaults() error {
	if c.NodeID == "" {
		return errors.New("cluster: NodeID is required")
	}
	if len(c.NodeID) > fsm.MaxNameLen {
		// Every command naming this node would be refused.
		return fmt.Errorf("cluster: NodeID is %d bytes long, longer than %d", len(c.NodeID), fsm.MaxNameLen)
	}
	if c.DataDir == "" {
		return errors.New("cluster: DataDir is required")
	}
	if c.RaftAddr == "" {
		return errors.New("cluster: RaftAddr is required")
	}
	if c.GossipAddr == "" {
		return errors.New("cluster: GossipAddr is required")
	}
	if c.QueueGroups < 0 || c.QueueGroups > fsm.MaxQueueGroups {
		return fmt.Errorf("cluster: QueueGroups is %d (0 to %d)", c.QueueGroups, fsm.MaxQueueGroups)
	}
	if c.BootstrapExpect <= 0 {
		c.BootstrapExpect = 1
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DefaultUser == "" {
		c.DefaultUser = "guest"
	}
	if c.DefaultPassword == "" {
		c.DefaultPassword = "guest"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, time.Second)
	def(&c.ElectionTimeout, time.Second)
	def(&c.LeaderLeaseTimeout, 500*time.Millisecond)
	def(&c.CommitTimeout, 2*time.Millisecond)
	def(&c.SnapshotInterval, 30*time.Second)
	if least := LeastDownAfter(c.HeartbeatTimeout); c.NodeDownAfter <= 0 {
		c.NodeDownAfter = max(DefaultNodeDownAfter, least)
	} else if c.NodeDownAfter < least {
		return fmt.Errorf("cluster: NodeDownAfter %v is shorter than HeartbeatTimeout %v: an idle group's leader and a live follower hear from each other only every two fifths of it, so live nodes would count themselves cut off",
			c.NodeDownAfter, least)
	}
	def(&c.ReconcileInterval, 5*time.Second)
	def(&c.LeadershipBalanceAfter, DefaultLeadershipBalanceAfter)
	def(&c.PlaceGrace, DefaultPlaceGrace)
	def(&c.JoinRetryInterval, time.Second)
	def(&c.LeaderWait, 10*time.Second)
	def(&c.MaxClockOffset, DefaultMaxClockOffset)
	def(&c.ClockSampleInterval, time.Second)
	if c.ConsumerTimeout == 0 {
		c.ConsumerTimeout = fsm.DefaultConsumerTimeout * time.Millisecond
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
		c.scaleSnapshotThreshold = true
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 10240
	}
	if c.SnapshotBytes == 0 {
		c.SnapshotBytes = DefaultSnapshotBytes
	}
	if c.MaxBatchCommands <= 0 {
		c.MaxBatchCommands = 1024
	}
	if c.MaxInflightEntries <= 0 {
		c.MaxInflightEntries = 4
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 1 << 20
	}
	for _, k := range c.GossipKeys {
		if err := linksec.CheckGossipKey(k); err != nil {
			return err
		}
	}
	if c.Protocol == 0 {
		c.Protocol = fsm.Protocol
	}
	if c.Protocol > fsm.Protocol {
		// The leader would let in what this node cannot apply.
		return fmt.Errorf("cluster: Protocol %d is above %d, the highest this version applies", c.Protocol, fsm.Protocol)
	}
	return nil
}

// LeastDownAfter is the shortest NodeDownAfter a HeartbeatTimeout
// allows: the timeout itself. A live follower of an idle group hears from
// its leader, and answers the leader's RPCs that go, only up to
// 2×HeartbeatTimeout/5 apart (group.QuietAppends,
// membership.UnreachedAfter). A node silent for half of NodeDownAfter
// counts itself suspect (quorum.Watch: it holds what it applies until a
// Tick commits), and the leader declares one silent for NodeDownAfter
// down (its consumers cancelled, its connections closed); so half of it
// must outlast that gap, here by a quarter of it.
func LeastDownAfter(heartbeatTimeout time.Duration) time.Duration {
	return heartbeatTimeout
}

// DefaultMaxClockOffset is how far a node's wall clock may be from the
// quorum's before it refuses to lead (CockroachDB's default).
const DefaultMaxClockOffset = 500 * time.Millisecond

// DefaultNodeDownAfter is NodeDownAfter's default. A NodeDown frees what
// the node's consumers held; the node, if it runs after all, closes its
// clients' connections when it applies it and they reconnect. Raft's
// heartbeats to a dead node fail at once (the port refuses), so with this
// wait its messages are free about two seconds after it died.
const DefaultNodeDownAfter = 1500 * time.Millisecond
