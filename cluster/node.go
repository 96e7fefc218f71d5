package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
	"google.golang.org/grpc"
)

// Config is what a node is started with. Addresses are host:port.
type Config struct {
	// NodeID is the node's id, unique in the cluster and stable across
	// restarts (it is the raft server id and the memberlist name).
	NodeID string
	// DataDir holds the raft log and stable store, and the snapshots.
	DataDir string
	// LogStore is the raft log and stable store: LogStoreWAL, LogStoreBolt
	// or LogStoreAuto (default: what DataDir already holds, else the WAL).
	LogStore string
	// RaftAddr is the raft transport listen address; RaftAdvertise the
	// address peers dial (default: RaftAddr, or the first private IP when
	// RaftAddr has no host).
	RaftAddr      string
	RaftAdvertise string
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
	// GRPCServer receives the internal Forward service; the caller serves it
	// (after Start returns). Forwarded requests carry whole messages: the
	// server must accept messages as large as the largest publish
	// (grpc.MaxRecvMsgSize and grpc.MaxSendMsgSize).
	GRPCServer *grpc.Server
	// Effects receives the effects addressed to this node (deliveries to its
	// consumers, cancellations of its consumers). It is called under the
	// state lock, in log order: it must not block for long nor call back
	// into the node.
	Effects fsm.Sink
	// Replies receives the direct replies other nodes send to this node's
	// channels (nil: they are dropped).
	Replies ReplySink
	// Pauser is told when this node loses contact with a majority of the
	// cluster for NodeDownAfter, and when it has it again (quorum.go).
	Pauser Pauser
	// Clock stamps the log and drives the leader's schedulers (default: the
	// wall clock).
	Clock Clock
	// MaxClockOffset is how far this node's wall clock may be from the
	// quorum's before it refuses to lead (default DefaultMaxClockOffset).
	MaxClockOffset time.Duration
	// ClockSampleInterval is how often the node reads the voters' clocks
	// (default 1 s).
	ClockSampleInterval time.Duration
	// Logger receives the node's logs (default: slog.Default()).
	Logger *slog.Logger
	// DefaultUser and DefaultPassword are the user the first leader creates
	// in a new cluster (default guest/guest).
	DefaultUser     string
	DefaultPassword string

	// Timing knobs; zero values mean production defaults.

	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout tune raft
	// (defaults 1 s, 1 s, 500 ms).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long raft waits before replicating an idle
	// commit index to followers, which bounds follower apply lag under light
	// load (default 2 ms: about 3 ms of lag; raft allows 1 ms at least).
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
	// NodeDownAfter is how long a member stays dead in gossip, or a server
	// unreached by the leader's raft, before the leader proposes NodeDown
	// for it (default DefaultNodeDownAfter).
	NodeDownAfter time.Duration
	// ReconcileInterval is how often the leader reconciles members with the
	// raft configuration, besides member events (default 5 s).
	ReconcileInterval time.Duration
	// JoinRetryInterval is the pause between join attempts (default 1 s).
	JoinRetryInterval time.Duration
	// LeaderWait bounds how long Submit waits for a leader when its context
	// has no deadline (default 10 s).
	LeaderWait time.Duration
	// Gossip adjusts the memberlist configuration (tests tighten timings).
	Gossip func(*memberlist.Config)
	// Links cuts links for fault-injection tests (nil: no faults).
	Links *Links
	// TLS, when set, secures the links between nodes with mutual TLS: the
	// raft transport and the forwarding client, and the internal service
	// takes only calls with a node certificate. The caller's gRPC server
	// must use the same TLS (ServerOptions(tls)). It comes from an
	// operator's CA (LoadTLS, NewTLS) or from the cluster secret
	// (SecretTLS). Nil: plain TCP, open to anyone who reaches the ports,
	// for in-process tests only (the raftmq command never runs so).
	TLS *TLS
	// GossipKeys, when set, encrypt and authenticate gossip with
	// memberlist's keyring (AES-GCM; 16, 24 or 32 bytes each): the first
	// key encrypts, every key decrypts, and a packet no key opens is
	// dropped, so a node without a key cannot join. Nil: plain gossip.
	GossipKeys [][]byte
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
	// ConsumerTimeout is how long a delivery may stay unacknowledged before
	// its channel is closed, for queues that set no x-consumer-timeout nor
	// consumer-timeout policy (default fsm.DefaultConsumerTimeout, 30
	// minutes; negative: none). The leader's value applies: it is written
	// into each ConsumerTimeout it proposes.
	ConsumerTimeout time.Duration
	// Protocol is the command protocol this node announces (default and
	// upper bound fsm.Protocol). Only tests set it lower: such a node
	// stands for one of an earlier release during a rolling upgrade, and
	// holds back new command kinds and the log's protocol level.
	Protocol uint32
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
	if c.BootstrapExpect <= 0 {
		c.BootstrapExpect = 1
	}
	if c.Clock == nil {
		c.Clock = RealClock()
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
	def(&c.NodeDownAfter, DefaultNodeDownAfter)
	def(&c.ReconcileInterval, 5*time.Second)
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
		if err := checkGossipKey(k); err != nil {
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

// DefaultNodeDownAfter is NodeDownAfter's default. A NodeDown frees what
// the node's consumers held; the node, if it runs after all, closes its
// clients' connections when it applies it and they reconnect. Raft's
// heartbeats to a dead node fail at once (the port refuses), so with this
// wait its messages are free about two seconds after it died.
const DefaultNodeDownAfter = 1500 * time.Millisecond

// Node is one raftmq cluster member: a raft replica of the state machine,
// a memberlist member, and the path by which commands reach the leader.
type Node struct {
	cfg   Config
	log   *slog.Logger
	stamp *stamper
	// group is the node's Raft group: raft, its storage and body store,
	// the adapter that applies its log to state, and the way into the
	// log (submitter, group commit, forwarding stream).
	group *group.Group
	trans *raft.NetworkTransport
	out   *outbound // the connections it dialed, ended by Close
	// removed holds the servers an operator removed (RemoveNode) while
	// they were alive: reconcile adds alive members as voters, and would
	// undo the removal at its next round. An id is forgotten once gossip
	// no longer sees the member alive, so a node that comes back joins.
	removed sync.Map
	list    *memberlist.Memberlist
	advert  string // advertised raft address
	// replyConns carry direct replies to other nodes (reply.go).
	replyConns peerConns

	gossipAddr string // advertised gossip address

	peersMu sync.Mutex
	peers   []string // remembered gossip addresses of the other members (peers.go)

	verifyMu     sync.Mutex
	verifyFailed map[string]verifyFailure // members whose certificate failed, by id@addr

	lead    atomic.Pointer[leaderTerm] // non-nil while this node is a ready leader
	changed *broadcast                 // leader, readiness or membership changed

	members  *memberTable
	reach    *reach       // whom this node's raft and pings reach (reach.go)
	watch    *quorumWatch // this node's own contact with a majority (quorum.go)
	hasState atomic.Bool
	leaving  atomic.Bool

	// gossipedUnreachable is what the leader gossips raft does not reach
	// (liveness.go).
	gossipedUnreachable atomic.Pointer[[]string]

	notifyCh chan bool
	ready    chan struct{} // closed once a restarted node's past is cleared
	restart  bool          // the node started with raft state on disk
	bootMs   int64         // when this run started (unix ms), gossiped
	closing  chan struct{}
	// protocol is the command protocol this node announces
	// (Config.Protocol; tests change it).
	protocol atomic.Uint32
	// failed is closed when the node cannot apply the log; failErr says why.
	failed   chan struct{}
	failOnce sync.Once
	failErr  error
	closeMu  sync.Mutex
	closed   bool
	wg       sync.WaitGroup

	// qclock holds the voters' clock readings (quorumclock.go).
	qclock *quorumClock
}

// Start opens the node's storage, starts raft, memberlist and the
// forwarding service, and returns at once: joining, bootstrapping and
// elections go on in the background. ctx bounds the start-up only.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.NodeID),
		qclock:   newQuorumClock(cfg),
		changed:  newBroadcast(),
		members:  newMemberTable(),
		reach:    newReach(),
		watch:    newQuorumWatch(),
		notifyCh: make(chan bool, 16),
		ready:    make(chan struct{}),
		closing:  make(chan struct{}),
		failed:   make(chan struct{}),
		out:      newOutbound(),
		bootMs:   cfg.Clock.Now().UnixMilli(),
	}
	n.protocol.Store(cfg.Protocol)
	n.stamp = newStamper(cfg.Clock, n.qclock, cfg.MaxClockOffset)
	if err := n.startRaft(); err != nil {
		_ = n.Close()
		return nil, err
	}
	if err := n.startGossip(); err != nil {
		_ = n.Close()
		return nil, err
	}
	if !n.hasState.Load() && cfg.BootstrapExpect == 1 {
		if err := n.bootstrap([]raft.Server{{ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(n.advert)}}); err != nil {
			_ = n.Close()
			return nil, err
		}
	}
	// Last, so that a failed start leaves the server untouched.
	if cfg.GRPCServer != nil {
		n.registerInternal(cfg.GRPCServer)
	}
	n.wg.Add(3)
	go n.clockLoop()
	n.group.Batcher().Run()
	go n.monitorLeadership()
	go n.housekeeping()
	n.group.RunSnapshots(n.closing)
	n.wg.Add(2)
	go n.publishReach()
	go n.watchQuorum()
	n.loadPeers()
	if len(n.joinSeeds()) > 0 {
		n.wg.Add(1)
		go n.joinLoop()
	}
	if n.restart {
		n.wg.Add(2)
		go n.clearPastIncarnation()
		go func() {
			defer n.wg.Done()
			n.group.SnapshotAfterReplay(n.closing)
		}()
	} else {
		close(n.ready)
	}
	return n, nil
}

func (n *Node) startRaft() error {
	cfg := &n.cfg
	hlog := newHCLogger(n.log.With("subsystem", "raft"))
	var err error
	n.group, err = group.Open(group.Config{
		ID:      cfg.NodeID,
		Dir:     cfg.DataDir,
		Storage: group.StorageOptions{LogStore: cfg.LogStore, SnapshotBytes: cfg.SnapshotBytes, InlineMax: cfg.inlineMax},
		Raft: group.RaftTimings{HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout,
			LeaderLeaseTimeout: cfg.LeaderLeaseTimeout, CommitTimeout: cfg.CommitTimeout, SnapshotThreshold: cfg.SnapshotThreshold,
			SnapshotInterval: cfg.SnapshotInterval, TrailingLogs: cfg.TrailingLogs},
		ScaleSnapshotThreshold: cfg.scaleSnapshotThreshold,
		NotifyCh:               n.notifyCh,
		Logger:                 n.log,
		RaftLogger:             hlog,
		FSM: group.FSMConfig{NodeID: cfg.NodeID, Logger: n.log,
			Host: group.FSMHost{Effects: n.effects, Applying: n.checkStall, Fail: n.fail, Err: n.Err}},
		Pipeline: group.PipelineConfig{
			MaxCommands: cfg.MaxBatchCommands, MaxBytes: cfg.MaxBatchBytes, MaxInflight: cfg.MaxInflightEntries,
			MaxMessageSize:  cfg.MaxMessageSize,
			LeaderWait:      cfg.LeaderWait,
			Leading:         func() bool { return n.lead.Load() != nil },
			Stamp:           n.stamp.next,
			CommandProtocol: func(c *proto.Command) uint32 { return (*commandProtocol.Load())(c) },
			ClusterProtocol: n.clusterProtocol,
			Leader:          n.waitLeader,
			Changed:         n.changed.wait,
			Dial:            n.dialInternal,
		},
		Closing: n.closing,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.RaftAddr)
	if err != nil {
		return fmt.Errorf("cluster: raft listen: %w", err)
	}
	n.advert, err = advertiseAddr(cfg.RaftAdvertise, ln.Addr().String())
	if err != nil {
		_ = ln.Close()
		return err
	}
	layer := &streamLayer{ln: ln, advert: n.advert, links: cfg.Links, out: n.out}
	if cfg.TLS != nil {
		layer.tls = n.tlsServerConfig()
		layer.dial = n.dialTLS
	}
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hlog,
	})

	has, err := n.group.Start(n.trans.Consumer(), func(rpcs <-chan raft.RPC) raft.Transport {
		return reachTransport{group.NoPipeline{NetworkTransport: n.trans}, n.reach, rpcs}
	}, n.closing)
	if err != nil {
		return err
	}
	n.hasState.Store(has)
	n.restart = has
	r := n.group.Raft()
	obs := make(chan raft.Observation, 16)
	r.RegisterObserver(raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	n.watchLeaders(r)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			select {
			case o := <-obs:
				if lo, ok := o.Data.(raft.LeaderObservation); ok {
					n.group.Forwarder().LeaderChanged(string(lo.LeaderID))
				}
				n.changed.signal()
			case <-n.closing:
				return
			}
		}
	}()
	return nil
}

// advertiseAddr picks the address peers dial: the explicit one, else the
// listener's, with an unspecified host replaced by a private IP.
func advertiseAddr(explicit, listen string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("cluster: address %q: %w", listen, err)
	}
	ip := net.ParseIP(host)
	if ip != nil && !ip.IsUnspecified() {
		return listen, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return net.JoinHostPort(ipn.IP.String(), port), nil
			}
		}
	}
	return net.JoinHostPort("127.0.0.1", port), nil
}

// bootstrap writes the first raft configuration.
func (n *Node) bootstrap(servers []raft.Server) error {
	err := n.await(context.Background(), n.group.Raft().BootstrapCluster(raft.Configuration{Servers: servers}))
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("cluster: bootstrap: %w", err)
	}
	n.log.Info("bootstrapped the cluster", "voters", len(servers))
	n.setHasState()
	return nil
}

// await waits for a raft future until ctx ends or the node closes
// (group.Await).
func (n *Node) await(ctx context.Context, f raft.Future) error {
	return group.Await(ctx, n.closing, f)
}

// Ready is closed once the node may serve clients. A node that restarts
// with state on disk first proposes NodeDown for itself, so the consumers,
// unacked deliveries and exclusive queues of its previous run are released
// before its new connections register; a new node is ready at once. The
// AMQP listener should wait for it.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// clearPastIncarnation proposes NodeDown{self} until it commits, then
// closes ready.
func (n *Node) clearPastIncarnation() {
	defer n.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	cmd := &proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: n.cfg.NodeID}}}
	for {
		res, err := n.Submit(ctx, cmd)
		if err == nil {
			n.log.Info("released the previous run's consumers", "index", res.GetIndex())
			close(n.ready)
			return
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Debug("releasing the previous run: waiting for a leader", "err", err)
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return
		}
	}
}

// Failed is closed when this node cannot apply the next committed entry
// (one written by a newer version): it stops applying, keeps its state as
// of the entry before, and the process should exit with Err. Restarting
// the same binary stops at the same entry; upgrading it lets it go on.
func (n *Node) Failed() <-chan struct{} { return n.failed }

// Err is why Failed closed, nil before.
func (n *Node) Err() error {
	select {
	case <-n.failed:
		return n.failErr
	default:
		return nil
	}
}

// fail records that the log cannot be applied here.
func (n *Node) fail(err error) {
	n.failOnce.Do(func() {
		n.failErr = err
		n.log.Error("cannot apply the raft log: stopping", "err", err)
		close(n.failed)
	})
}

// NodeID is this node's id.
func (n *Node) NodeID() string { return n.cfg.NodeID }

// RaftAddr is the raft address peers dial.
func (n *Node) RaftAddr() string { return n.advert }

// GossipAddr is the gossip address peers join (useful when GossipAddr asked
// for port 0).
func (n *Node) GossipAddr() string { return n.gossipAddr }

// IsLeader reports whether this node is the leader and ready to accept
// commands (its first barrier has passed).
func (n *Node) IsLeader() bool { return n.lead.Load() != nil }

// Leader returns the id and raft address of the leader this node knows of
// (empty when none).
func (n *Node) Leader() (id, addr string) {
	a, i := n.group.Raft().LeaderWithID()
	return string(i), string(a)
}

// View runs fn with the state machine under the state lock. fn must only
// read, and must not keep m or anything it returns beyond the call.
func (n *Node) View(fn func(m *fsm.Machine)) {
	n.group.State().View(fn)
}

// ConsistentView runs fn like View after making sure this node is the
// leader and has applied everything committed before the call (a raft
// barrier). On a follower it returns ErrNotLeader.
func (n *Node) ConsistentView(ctx context.Context, fn func(m *fsm.Machine)) error {
	if n.group.Raft().State() != raft.Leader {
		return ErrNotLeader
	}
	if err := n.Barrier(ctx); err != nil {
		return err
	}
	n.View(fn)
	return nil
}

// Barrier waits until every entry committed before the call is applied
// here. It runs on the leader only.
func (n *Node) Barrier(ctx context.Context) error {
	timeout := n.cfg.LeaderWait
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if err := n.await(ctx, n.group.Raft().Barrier(timeout)); err != nil {
		return group.MapRaftError(err)
	}
	return nil
}

// AppliedIndex is the highest log index the local state machine has
// applied.
func (n *Node) AppliedIndex() uint64 {
	i, _ := n.group.Applied().Load()
	return i
}

// WaitApplied blocks until the local state machine has applied index.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	return n.group.Applied().Wait(ctx, n.closing, index)
}

// Stats is a summary of the node's raft state.
type Stats struct {
	State             string
	Term              uint64
	CommitIndex       uint64
	AppliedIndex      uint64 // raft's applied index
	FSMIndex          uint64 // the state machine's applied index
	LastLogIndex      uint64
	LastSnapshotIndex uint64
	LastContact       string
	LeaderID          string
	LeaderAddr        string
	// ClockMs is the state machine's log clock.
	ClockMs int64
}

// Stats returns the node's raft state, term and indexes.
func (n *Node) Stats() Stats {
	m := n.group.Raft().Stats()
	u := func(k string) uint64 {
		v, _ := strconv.ParseUint(m[k], 10, 64)
		return v
	}
	s := Stats{
		State:             m["state"],
		Term:              u("term"),
		CommitIndex:       u("commit_index"),
		AppliedIndex:      u("applied_index"),
		LastLogIndex:      u("last_log_index"),
		LastSnapshotIndex: u("last_snapshot_index"),
		LastContact:       m["last_contact"],
		FSMIndex:          n.AppliedIndex(),
	}
	s.LeaderID, s.LeaderAddr = n.Leader()
	n.View(func(m *fsm.Machine) { s.ClockMs = m.Clock() })
	return s
}

// TransferLeadership hands leadership to the node id (empty: the most
// up-to-date follower) and waits for the transfer. It runs on the leader.
func (n *Node) TransferLeadership(id string) error {
	if n.group.Raft().State() != raft.Leader {
		return ErrNotLeader
	}
	var f raft.Future
	if id == "" {
		f = n.group.Raft().LeadershipTransfer()
	} else {
		srv, ok := n.server(id)
		if !ok {
			return fmt.Errorf("cluster: node %q is not in the raft configuration", id)
		}
		f = n.group.Raft().LeadershipTransferToServer(srv.ID, srv.Address)
	}
	if err := n.await(context.Background(), f); err != nil {
		return fmt.Errorf("cluster: transfer leadership: %w", group.MapRaftError(err))
	}
	return nil
}

// RemoveNode removes the node id from the raft configuration. It runs on
// the leader.
func (n *Node) RemoveNode(id string) error {
	if n.group.Raft().State() != raft.Leader {
		return ErrNotLeader
	}
	if _, ok := n.server(id); !ok {
		return fmt.Errorf("cluster: node %q is not in the raft configuration", id)
	}
	n.removed.Store(id, true)
	if err := n.await(context.Background(), n.group.Raft().RemoveServer(raft.ServerID(id), 0, n.cfg.LeaderWait)); err != nil {
		n.removed.Delete(id)
		return fmt.Errorf("cluster: remove %s: %w", id, group.MapRaftError(err))
	}
	return nil
}

// server finds id in the latest raft configuration.
func (n *Node) server(id string) (raft.Server, bool) {
	f := n.group.Raft().GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

// Leave leaves the cluster gracefully: the leader first hands over its
// leadership; the node then announces through gossip that it is leaving,
// the leader removes it from the raft configuration (and declares it down),
// and once it is out of the configuration (or after LeaderWait) it leaves
// the gossip and closes.
func (n *Node) Leave() error {
	n.leaving.Store(true)
	if n.group.Raft().State() == raft.Leader && n.voters() > 1 {
		if err := n.TransferLeadership(""); err != nil {
			n.log.Warn("leave: leadership transfer failed", "err", err)
		}
	}
	if n.list != nil {
		if err := n.list.UpdateNode(n.cfg.LeaderWait); err != nil {
			n.log.Warn("leave: gossip update failed", "err", err)
		}
	}
	if n.voters() > 1 {
		deadline := time.Now().Add(n.cfg.LeaderWait)
		for time.Now().Before(deadline) {
			if _, in := n.server(n.cfg.NodeID); !in {
				break
			}
			_, ch := n.group.Applied().Load()
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-ch:
			case <-t.C:
			}
			t.Stop()
		}
	}
	if n.list != nil {
		if err := n.list.Leave(n.cfg.LeaderWait); err != nil {
			n.log.Warn("leave: gossip leave failed", "err", err)
		}
	}
	return n.Close()
}

func (n *Node) voters() int {
	f := n.group.Raft().GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// Close stops the node without leaving the cluster (peers see it fail).
func (n *Node) Close() error {
	n.closeMu.Lock()
	if n.closed {
		n.closeMu.Unlock()
		return nil
	}
	n.closed = true
	close(n.closing)
	n.closeMu.Unlock()
	// Nothing waits for a peer's answer from now on: what raft and gRPC
	// have in flight to peers that stopped answering ends now rather
	// than at its timeout.
	n.out.abort()
	n.group.Forwarder().Close()
	n.replyConns.close()
	var err error
	if n.group != nil {
		if f := n.group.Shutdown(); f != nil {
			err = f.Error()
		}
	}
	if n.list != nil {
		_ = n.list.Shutdown() // ends a join in progress
	}
	n.wg.Wait()
	n.group.Batcher().Wait()
	n.cleanup()
	return err
}

// cleanup releases what Start opened.
func (n *Node) cleanup() {
	if n.list != nil {
		_ = n.list.Shutdown()
	}
	if n.group != nil && !n.closed {
		if f := n.group.Shutdown(); f != nil {
			_ = f.Error()
		}
	}
	if n.trans != nil {
		_ = n.trans.Close()
		n.trans.CloseStreams()
	}
	if n.group != nil {
		n.group.Close() // its body store and storage
	}
}

// streamLayer is the raft TCP transport's network, routed through Links.
// With tls set, accepted connections are TLS servers (the handshake runs on
// the connection's first read, in raft's handler, not in Accept) and dial
// dials TLS.
type streamLayer struct {
	ln     net.Listener
	advert string
	links  *Links
	tls    *tls.Config
	dial   func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error)

	// out dials: the node's Close ends those connections.
	out *outbound

	mu       sync.Mutex
	accepted map[net.Conn]struct{}
	closed   bool
}

// Accept implements net.Listener; it keeps the connections so that Close
// can drop them (raft's transport leaves accepted connections open).
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	if s.accepted == nil {
		s.accepted = map[net.Conn]struct{}{}
	}
	if s.tls != nil {
		c = tls.Server(c, s.tls)
	}
	ac := &acceptedConn{Conn: c, layer: s}
	s.accepted[ac] = struct{}{}
	return ac, nil
}

// acceptedConn leaves its stream layer's set when closed.
type acceptedConn struct {
	net.Conn
	layer *streamLayer
}

func (c *acceptedConn) Close() error {
	c.layer.mu.Lock()
	delete(c.layer.accepted, c)
	c.layer.mu.Unlock()
	return c.Conn.Close()
}

// Close implements net.Listener and closes every accepted connection.
func (s *streamLayer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	conns := s.accepted
	s.accepted = nil
	s.mu.Unlock()
	for c := range conns {
		_ = c.(*acceptedConn).Conn.Close()
	}
	return err
}

func (s *streamLayer) Addr() net.Addr { return advertAddr(s.advert) }
func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	dial := s.links.dial
	if s.dial != nil {
		dial = s.dial
	}
	return s.out.dial(context.Background(), string(addr), timeout, dial)
}

type advertAddr string

func (a advertAddr) Network() string { return "tcp" }
func (a advertAddr) String() string  { return string(a) }

// broadcast wakes every waiter at each signal.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcast) signal() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.mu.Unlock()
}

// LogEntries calls fn for each command entry still in the local raft log
// (entries compacted into a snapshot are gone), in index order, until fn
// returns false. It is meant for diagnostics and tests.
func (n *Node) LogEntries(fn func(index uint64, env *proto.Envelope) bool) error {
	store := n.group.Storage().Store()
	first, err := store.FirstIndex()
	if err != nil {
		return err
	}
	last, err := store.LastIndex()
	if err != nil {
		return err
	}
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return err
		}
		if l.Type != raft.LogCommand {
			continue
		}
		env, err := group.DecodeEntry(&l)
		if err != nil {
			return err
		}
		if !fn(l.Index, env) {
			return nil
		}
	}
	return nil
}
