package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/raftmq/raftmq/bodies"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

// Config is what a group is opened with.
type Config struct {
	// ID is this server's id in the group's raft configuration.
	ID string
	// GroupID is the group's id (DefaultID: the node's metadata group).
	// A follower's forwarding stream names it (ForwardGroup).
	GroupID string
	// Dir is the group's directory: its log and stable store, snapshots
	// and body files.
	Dir     string
	Storage StorageOptions
	// Raft tunes the group's raft (raft's own names and meanings).
	Raft RaftTimings
	// ScaleSnapshotThreshold raises raft's entry threshold for a snapshot
	// with the messages the state holds (snapthreshold.go): the node's
	// SnapshotThreshold was left at its default.
	ScaleSnapshotThreshold bool
	// NotifyCh receives raft's leadership changes (raft.Config.NotifyCh).
	NotifyCh chan bool
	// Logger and RaftLogger are the group's and its raft's logs
	// (defaults: slog.Default(), none).
	Logger     *slog.Logger
	RaftLogger hclog.Logger
	// FSM is the state machine adapter's part of the node; its State,
	// Applied, Proposals, Storage, Bodies, TrailingLogs and Closing are
	// the group's and set by Open.
	FSM FSMConfig
	// Pipeline is the node's part of the way into the group's log.
	Pipeline PipelineConfig
	// Closing is closed when the node closes: the group's goroutines end
	// and its waits give up.
	Closing <-chan struct{}
}

// PipelineConfig is what the node gives the way into a group's log
// (Submitter, Batcher, Forwarder): bounds, and its own part as functions.
type PipelineConfig struct {
	// MaxCommands and MaxBytes bound one entry and one forwarded request;
	// MaxInflight the entries in flight; MaxMessageSize a publish body.
	MaxCommands    int
	MaxBytes       int
	MaxInflight    int
	MaxMessageSize int
	// LeaderWait bounds the wait for a leader (SubmitterConfig).
	LeaderWait time.Duration
	// Leading, Stamp, CommandProtocol and ClusterProtocol are the
	// batcher's (BatcherConfig).
	Leading         func() bool
	Stamp           func() int64
	CommandProtocol func(*proto.Command) uint32
	ClusterProtocol func() uint32
	// Leader and Changed are the submitter's (SubmitterConfig).
	Leader  func(ctx context.Context, deadline time.Time) (Target, error)
	Changed func() <-chan struct{}
	// Dial is the forwarder's (ForwarderConfig).
	Dial func(id, addr string) (*grpc.ClientConn, error)
}

// RaftTimings are the raft settings a node chooses for its groups.
type RaftTimings struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotThreshold  uint64
	SnapshotInterval   time.Duration
	TrailingLogs       uint64
}

// Group is one Raft group of a node: one hashicorp/raft instance, its
// storage and body store in its directory, the adapter that applies its
// log to its state, and the way into its log (Submitter, Batcher,
// Forwarder). Open opens what is on disk; Start starts raft on a
// transport; the node runs the batcher (Batcher().Run) and the snapshot
// loops (RunSnapshots) once it is up.
type Group struct {
	cfg       Config
	state     *State
	applied   *AppliedIndex
	proposals *Proposals
	submit    *Submitter
	batcher   *Batcher
	fwd       *Forwarder
	storage   *Storage
	bodies    *bodies.Store
	fsm       *FSM
	logs      raft.LogStore
	bulk      *Bulk
	quiet     *QuietAppends
	news      *CommitNews
	reload    sync.Mutex // one raft.ReloadConfig at a time (reloadConfig)
	// silenceChecks counts the silence watch's looks (tests).
	silenceChecks atomic.Uint64
	// raft is set once Start has it: the transport's handshakes may ask
	// for it before.
	raft atomic.Pointer[raft.Raft]
	wg   sync.WaitGroup
}

// Open builds the group's state and the way into its log, opens its
// storage (OpenStorage) and body store in cfg.Dir, and builds its state
// machine adapter. It returns the group also when it fails: Close
// releases what was opened.
func Open(cfg Config) (*Group, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RaftLogger == nil {
		cfg.RaftLogger = hclog.NewNullLogger()
	}
	g := &Group{cfg: cfg, state: NewState(), applied: NewAppliedIndex(), proposals: &Proposals{}}
	pc := cfg.Pipeline
	g.batcher = NewBatcher(BatcherConfig{MaxCommands: pc.MaxCommands, MaxBytes: pc.MaxBytes, MaxInflight: pc.MaxInflight,
		MaxMessageSize: pc.MaxMessageSize, Leading: pc.Leading, Stamp: pc.Stamp, CommandProtocol: pc.CommandProtocol,
		ClusterProtocol: pc.ClusterProtocol, Proposals: g.proposals, Refusal: g.refusal, Raft: g.Raft,
		Logger: cfg.Logger, Closing: cfg.Closing})
	g.fwd = NewForwarder(ForwarderConfig{MaxCommands: pc.MaxCommands, MaxBytes: pc.MaxBytes, Dial: pc.Dial, Group: cfg.GroupID})
	g.submit = NewSubmitter(SubmitterConfig{LeaderWait: pc.LeaderWait, Leader: pc.Leader, Changed: pc.Changed,
		Batcher: g.batcher, Forwarder: g.fwd, Applied: g.applied, State: g.state, Closing: cfg.Closing})
	cfg.Storage.Logger, cfg.Storage.RaftLogger = cfg.Logger, cfg.RaftLogger
	st, err := OpenStorage(cfg.Dir, cfg.Storage)
	if err != nil {
		return g, err
	}
	g.storage = st
	cfg.Logger.Info("raft log store", "kind", st.Kind())
	g.bodies, err = bodies.Open(filepath.Join(cfg.Dir, "bodies"), st.Entries(), bodies.Options{})
	if err != nil {
		var ce *bodies.CorruptError
		if errors.As(err, &ce) {
			return g, &DataError{Path: ce.Path, Err: err}
		}
		return g, fmt.Errorf("cluster: body store: %w", err)
	}
	g.logs = st.Logs(g.bodies.Pin)
	// A leader's idle appends wait out their window unless the log grows;
	// its idle heartbeats to a fresh follower are answered.
	g.quiet = NewQuietAppends(cfg.Raft.HeartbeatTimeout / 5)
	g.quiet.AnswerHeartbeats()
	st.Meter().OnAppend(g.quiet.Wake)
	g.quiet.Applied(g.applied.Load)
	g.news = NewCommitNews(g.applied.Load, g.logs.LastIndex, func() uint64 {
		// 0, which no append was sent in, unless it leads.
		if r := g.Raft(); r != nil && r.State() == raft.Leader {
			return r.CurrentTerm()
		}
		return 0
	})
	fc := cfg.FSM
	fc.State, fc.Applied, fc.Proposals, fc.Closing = g.state, g.applied, g.proposals, cfg.Closing
	fc.Storage, fc.Bodies, fc.TrailingLogs = st, g.bodies, cfg.Raft.TrailingLogs
	g.fsm = NewFSM(fc)
	return g, nil
}

// refusal is RabbitMQ's refusal of a command as this leader's applied
// state judges it, made before the command enters an entry: a bind to a
// headers exchange with an x-match it does not know (fsm
// Machine.BindRefusal). The node the bind came in on checked it against
// its own state already, which may not hold yet an exchange declared a
// moment earlier through another node; the leader's does, as that
// declare was answered only once it applied here (a leader elected since
// may apply it a moment after its election). Like every check
// before the log, it leaves what the log holds to replay alike.
func (g *Group) refusal(c *proto.Command) *proto.Result {
	b, ok := c.GetCmd().(*proto.Command_Bind)
	if !ok {
		return nil
	}
	var r *proto.Result
	g.state.View(func(m *fsm.Machine) { r = m.BindRefusal(b.Bind) })
	return r
}

// Start starts the group's raft. in is what the transport receives (its
// Consumer); transport is the transport raft is given, built around the
// RPCs raft is to consume, which pass the gap mend (GapBridge) on their
// way from in. It reports whether the group had raft state on disk.
// Start's goroutine ends when closing closes; Close waits for it.
func (g *Group) Start(in <-chan raft.RPC, transport func(rpcs <-chan raft.RPC) raft.Transport, closing <-chan struct{}) (hadState bool, _ error) {
	cfg := &g.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = cfg.RaftLogger
	rc.HeartbeatTimeout = cfg.Raft.HeartbeatTimeout
	rc.ElectionTimeout = cfg.Raft.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.Raft.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.Raft.CommitTimeout
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.SnapshotThreshold = cfg.Raft.SnapshotThreshold
	rc.SnapshotInterval = cfg.Raft.SnapshotInterval
	rc.TrailingLogs = cfg.Raft.TrailingLogs
	rc.NotifyCh = cfg.NotifyCh
	if err := raft.ValidateConfig(rc); err != nil {
		return false, fmt.Errorf("cluster: raft config: %w", err)
	}
	st := g.storage
	snaps, store := st.Snapshots(), st.Stable()
	has, err := raft.HasExistingState(g.logs, store, snaps)
	if err != nil {
		return false, fmt.Errorf("cluster: read raft state: %w", err)
	}
	if has {
		last, err := g.logs.LastIndex()
		if err != nil {
			return has, fmt.Errorf("cluster: read raft log: %w", err)
		}
		g.fsm.ReplayUpTo(last)
	}
	gaps := st.GapBridge(in, func(from, to uint64) {
		cfg.Logger.Info("an append from the leader continues after the entries this node already holds past its snapshot", "prev_index", from, "continues_after", to)
	})
	gaps.bulk = g.bulk
	r, err := st.StartRaft(func() (*raft.Raft, error) {
		return raft.NewRaft(rc, g.fsm, g.logs, store, g.fsm.Snapshots(snaps), transport(gaps.Out()))
	})
	if err != nil {
		var de *DataError
		if errors.As(err, &de) {
			return has, err
		}
		return has, fmt.Errorf("cluster: start raft: %w", err)
	}
	g.raft.Store(r)
	g.wg.Add(4)
	go func() {
		defer g.wg.Done()
		gaps.Run(closing)
	}()
	go func() {
		defer g.wg.Done()
		g.watchCandidacy(r, closing)
	}()
	go func() {
		defer g.wg.Done()
		g.news.run(closing)
	}()
	go func() {
		defer g.wg.Done()
		g.watchSilence(r, closing)
	}()
	return has, nil
}

// Appends is the transport of the group's appends over nt, whose large
// entries go through bulk (nil: none): it answers the group's repeated
// idle appends (quietappends.go) and tells followers of commits
// (commitnews.go). Before Start.
func (g *Group) Appends(nt *raft.NetworkTransport, bulk *Bulk) NoPipeline {
	t := NoPipeline{NetworkTransport: nt, Bulk: bulk, Quiet: g.quiet, News: g.news}
	g.news.send = t.send
	return t
}

// Quiet answers the group's repeated idle appends (quietappends.go).
func (g *Group) Quiet() *QuietAppends { return g.quiet }

// News tells the group's followers of its commits (commitnews.go).
func (g *Group) News() *CommitNews { return g.news }

// UseBulk has the group's appends take their large entries from b
// (bulk.go); before Start.
func (g *Group) UseBulk(b *Bulk) { g.bulk = b }

// Raft is the group's raft instance, nil before Start has it.
func (g *Group) Raft() *raft.Raft { return g.raft.Load() }

// ID is the group's id (DefaultID: the node's metadata group).
func (g *Group) ID() string { return g.cfg.GroupID }

// Storage is the group's storage.
func (g *Group) Storage() *Storage { return g.storage }

// Bodies is the group's body store.
func (g *Group) Bodies() *bodies.Store { return g.bodies }

// ReadBody reads a body the group's state names (a delivery's, an outbox
// entry's) from the node's body store: the log's entry or the body file
// it was relocated to.
func (g *Group) ReadBody(ref queue.Body) ([]byte, error) {
	return (&batchBodies{store: g.bodies}).read(ref)
}

// FSM is the group's state machine adapter.
func (g *Group) FSM() *FSM { return g.fsm }

// State is the group's state machine under its lock; Applied the index
// it reached; Proposals the envelopes this node proposed.
func (g *Group) State() *State          { return g.state }
func (g *Group) Applied() *AppliedIndex { return g.applied }
func (g *Group) Proposals() *Proposals  { return g.proposals }

// Submitter is the way into the group's log; Batcher its group commit;
// Forwarder a follower's stream to the leader.
func (g *Group) Submitter() *Submitter { return g.submit }
func (g *Group) Batcher() *Batcher     { return g.batcher }
func (g *Group) Forwarder() *Forwarder { return g.fwd }

// TransferLeadership hands the group to the server id at addr, or to the
// most up-to-date follower when id is empty. Raft hands over through its
// replication to that follower, which in an idle group waits out an
// answer of QuietAppends; Wake ends the wait and has the group's appends
// go as raft sends them for a while.
func (g *Group) TransferLeadership(id raft.ServerID, addr raft.ServerAddress) raft.Future {
	g.quiet.Wake()
	if id == "" {
		return g.Raft().LeadershipTransfer()
	}
	return g.Raft().LeadershipTransferToServer(id, addr)
}

// Reached reports whether this node, leading the group, reached the
// follower id within a heartbeat timeout (QuietAppends.Reached).
func (g *Group) Reached(id raft.ServerID) bool {
	r := g.Raft()
	return r != nil && r.State() == raft.Leader && g.quiet.Reached(id, r.CurrentTerm())
}

// Failed reports whether this node, leading the group, failed to reach
// the follower id at its last try (QuietAppends.Failed).
func (g *Group) Failed(id raft.ServerID) bool {
	r := g.Raft()
	return r != nil && r.State() == raft.Leader && g.quiet.Failed(id, r.CurrentTerm())
}

// Shutdown stops the group's raft (raft.Shutdown); nil before Start.
func (g *Group) Shutdown() raft.Future {
	g.quiet.Close()
	if r := g.Raft(); r != nil {
		return r.Shutdown()
	}
	return nil
}

// Close waits for Start's goroutine (its closing must be closed) and
// closes the body store and the storage. raft must be shut down first.
func (g *Group) Close() {
	g.wg.Wait()
	if g.bodies != nil {
		_ = g.bodies.Close()
	}
	if g.storage != nil {
		_ = g.storage.Close()
	}
}
