package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/clock"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/cluster/links"
	"github.com/raftmq/raftmq/cluster/linksec"
	"github.com/raftmq/raftmq/cluster/membership"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/broadcast"
	"github.com/raftmq/raftmq/proto"
)

// Node is one raftmq cluster member: a raft replica of the state machine,
// a memberlist member, and the path by which commands reach the leader.
type Node struct {
	cfg Config
	log *slog.Logger
	// group is the node's Raft group: raft, its storage and body store,
	// the adapter that applies its log to state, and the way into the
	// log (submitter, group commit, forwarding stream).
	group *group.Group
	// queueGroups are the queue groups this node is a member of, and the
	// mux that shares the raft port among all its groups (queue_groups.go).
	queueGroups
	// remoteEffects follow the effects of the queue groups this node is
	// not a member of, for its channels (effects.go).
	remoteEffects

	// The node's other parts, each declared beside the code that owns it.
	roster    // membership: who is in the cluster and whom this node reaches (members.go)
	network   // the links to the other nodes (transport.go)
	lifecycle // start, failure and close

	sec    *linksec.Checker // the links' security (package linksec, tls.go)
	clocks *clock.Time      // log time: the stamper and the voters' clocks (package clock, time.go)

	lead     atomic.Pointer[leaderTerm] // non-nil while this node is a ready leader
	changed  *broadcast.Broadcast       // leader, readiness or membership changed
	notifyCh chan bool                  // raft's leadership changes, to monitorLeadership
}

// lifecycle is the node's start, failure and close.
type lifecycle struct {
	ready chan struct{} // closed once a restarted node's past is cleared
	// run names this start of the node, in its release of the previous
	// ones (clearPastIncarnation), which its clients outlive.
	run     string
	restart bool // the node started with raft state on disk
	closing chan struct{}
	// failed is closed when the node cannot apply the log; failErr says why.
	failed   chan struct{}
	failOnce sync.Once
	failErr  error
	closeMu  sync.Mutex
	closed   bool
	wg       sync.WaitGroup
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
		cfg:         cfg,
		log:         cfg.Logger.With("node", cfg.NodeID),
		changed:     broadcast.New(),
		notifyCh:    make(chan bool, 16),
		queueGroups: queueGroups{leadsKick: make(chan struct{}, 1), remoteAdded: make(chan struct{}, 1), regroup: make(chan struct{}, 1)},
		roster: roster{
			reach: membership.NewReach(),
		},
		network: network{out: links.NewOutbound()},
		lifecycle: lifecycle{
			run:     rand.Text(),
			ready:   make(chan struct{}),
			closing: make(chan struct{}),
			failed:  make(chan struct{}),
		},
	}
	n.gossip = n.newGossip()
	n.members = n.gossip.Members()
	n.sec = n.newLinkChecker()
	n.clocks = n.newTime()
	n.watch = n.newQuorumWatch()
	if err := n.startRaft(); err != nil {
		_ = n.Close()
		return nil, err
	}
	if err := n.gossip.Start(n.advert); err != nil {
		_ = n.Close()
		return nil, err
	}
	// A lone node (BootstrapExpect 1, no one to join) bootstraps at once.
	// One told to join waits to hear from a seed first (housekeeping):
	// bootstrapped alone it would refuse its cluster's servers until
	// that cluster's leader took it in, and its own first entry, at the
	// index and term of the cluster's first, would stay in its log.
	joins := n.gossip.Joins()
	if !n.gossip.HasState() && cfg.BootstrapExpect == 1 && !joins {
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
	n.wg.Add(5)
	go func() {
		defer n.wg.Done()
		n.gossip.PublishUnreachable(n.closing, n.changed.Wait, func() ([]string, bool) { return n.unreachable(), n.IsLeader() })
	}()
	go n.watchQuorum()
	go n.runQueueGroups()
	go n.gossipLeads()
	go n.steerRemoteGroups()
	if joins {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.gossip.Run(n.closing)
		}()
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
		ID:                     cfg.NodeID,
		GroupID:                group.DefaultID,
		Dir:                    cfg.DataDir,
		Storage:                group.StorageOptions{LogStore: cfg.LogStore, SnapshotBytes: cfg.SnapshotBytes, InlineMax: cfg.inlineMax},
		Raft:                   n.raftTimings(),
		ScaleSnapshotThreshold: cfg.scaleSnapshotThreshold,
		NotifyCh:               n.notifyCh,
		Logger:                 n.log,
		RaftLogger:             hlog,
		FSM: group.FSMConfig{NodeID: cfg.NodeID, Run: n.run, Logger: n.log,
			Host: group.FSMHost{Effects: n.effects, Applying: n.checkStall, Fail: n.fail, Err: n.Err}},
		Pipeline: n.pipeline(func() bool { return n.lead.Load() != nil }, n.changed.Wait, n.waitLeader),
		Closing:  n.closing,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.RaftAddr)
	if err != nil {
		return fmt.Errorf("cluster: raft listen: %w", err)
	}
	n.advert, err = links.AdvertiseAddr(cfg.RaftAdvertise, ln.Addr().String())
	if err != nil {
		_ = ln.Close()
		return err
	}
	layer := links.NewStreamLayer(links.LayerConfig{Listener: ln, Advert: n.advert, Links: cfg.Links,
		TLS: n.sec.RaftServerConfig(), Dial: n.sec.Dial, Out: n.out})
	// Every group of the node shares the one raft port; the metadata
	// group's layer is headerless, so a node of a release before queue
	// groups talks to it as it always did.
	n.mux = group.NewMux(layer, group.MuxConfig{Logger: slog.New(newRepeatHandler(n.log.Handler(), "remote"))})
	meta, err := n.mux.Layer(group.DefaultID)
	if err != nil {
		return err
	}
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  meta,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hlog,
	})

	bulkLayer, err := n.mux.Layer(group.BulkLayerID(group.DefaultID))
	if err != nil {
		return err
	}
	n.bulk = group.NewBulk(group.BulkConfig{Layer: bulkLayer, MaxEntry: group.MaxBulkEntry,
		Timeout: 10 * time.Second, Logger: n.log})
	n.group.UseBulk(n.bulk)
	has, err := n.group.Start(n.trans.Consumer(), func(rpcs <-chan raft.RPC) raft.Transport {
		return reachTransport{n.group.Appends(n.trans, n.bulk), n.reach, rpcs}
	}, n.closing)
	if err != nil {
		return err
	}
	n.restart = has
	if has {
		n.gossip.SetHasState()
	}
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
				n.changed.Signal()
			case <-n.closing:
				return
			}
		}
	}()
	return nil
}

// raftTimings are raft's settings for every group of the node.
func (n *Node) raftTimings() group.RaftTimings {
	cfg := &n.cfg
	return group.RaftTimings{HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout,
		LeaderLeaseTimeout: cfg.LeaderLeaseTimeout, CommitTimeout: cfg.CommitTimeout, SnapshotThreshold: cfg.SnapshotThreshold,
		SnapshotInterval: cfg.SnapshotInterval, TrailingLogs: cfg.TrailingLogs}
}

// pipeline is the way into a group's log as the node gives it: the
// node's bounds, stamps, protocols and dial, with the group's own
// leadership (leading), its changes and where its leader is.
func (n *Node) pipeline(leading func() bool, changed func() <-chan struct{},
	leader func(context.Context, time.Time) (group.Target, error)) group.PipelineConfig {
	cfg := &n.cfg
	return group.PipelineConfig{
		MaxCommands: cfg.MaxBatchCommands, MaxBytes: cfg.MaxBatchBytes, MaxInflight: cfg.MaxInflightEntries,
		MaxMessageSize:  cfg.MaxMessageSize,
		LeaderWait:      cfg.LeaderWait,
		Leading:         leading,
		Stamp:           n.clocks.Stamper().Next,
		CommandProtocol: func(c *proto.Command) uint32 { return (*commandProtocol.Load())(c) },
		ClusterProtocol: n.clusterProtocol,
		Leader:          leader,
		Changed:         changed,
		Dial:            n.dialInternal,
	}
}

// bootstrap writes the first raft configuration.
func (n *Node) bootstrap(servers []raft.Server) error {
	err := n.await(context.Background(), n.group.Raft().BootstrapCluster(raft.Configuration{Servers: servers}))
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("cluster: bootstrap: %w", err)
	}
	n.log.Info("bootstrapped the cluster", "voters", len(servers))
	n.gossip.SetHasState()
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

// clearPastIncarnation proposes NodeDown{self} until it commits, in the
// metadata log and then in each queue group the log names,
// then closes ready. A node killed and started again within
// NodeDownAfter is never declared down by the leader: without its own
// NodeDown in a queue group, the consumers its previous run had there
// would keep their messages for ever. Each must commit before the node
// takes clients, or it would drop the new run's consumers too.
func (n *Node) clearPastIncarnation() {
	defer n.wg.Done()
	ctx, cancel := n.untilClosed(context.Background())
	defer cancel()
	cmd := []*proto.Command{{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: n.cfg.NodeID, Run: n.run}}}}
	if !n.untilDone(ctx, group.DefaultID, func() ([]*proto.Result, error) { return n.SubmitBatch(ctx, cmd) }) {
		return
	}
	// The metadata log is applied here up to the NodeDown: its queue
	// groups are those of the previous run, or newer. A channel of the
	// node may have consumed in any of them, run here or not
	// (SubmitGroup goes to a group's leader either way).
	named := n.NamedQueueGroups()
	for _, id := range named {
		if !n.untilDone(ctx, id, func() ([]*proto.Result, error) { return n.SubmitGroup(ctx, id, cmd) }) {
			return
		}
	}
	if len(named) > 0 {
		// Clients come next: their commands go to the queues' groups
		// from the first (runQueueGroups may not have looked yet).
		n.named.Store(true)
	}
	close(n.ready)
}

// untilDone runs submit until it succeeds, and reports false if the node
// closes first; gid names the log for the log lines (group.DefaultID,
// "", for the metadata group).
func (n *Node) untilDone(ctx context.Context, gid string, submit func() ([]*proto.Result, error)) bool {
	for {
		res, err := submit()
		if err == nil {
			n.log.Info("released the previous run's consumers", "group", gid, "index", res[0].GetIndex(), "run", n.run)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		n.log.Debug("releasing the previous run: waiting for a leader", "group", gid, "err", err)
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return false
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
func (n *Node) GossipAddr() string { return n.gossip.Addr() }

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
		f = n.group.TransferLeadership("", "")
	} else {
		srv, ok := n.server(id)
		if !ok {
			return fmt.Errorf("cluster: node %q is not in the raft configuration", id)
		}
		f = n.group.TransferLeadership(srv.ID, srv.Address)
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
	n.removed.Store(id, n.removedBoot(id))
	if err := n.await(context.Background(), n.group.Raft().RemoveServer(raft.ServerID(id), 0, n.cfg.LeaderWait)); err != nil {
		n.removed.Delete(id)
		return fmt.Errorf("cluster: remove %s: %w", id, group.MapRaftError(err))
	}
	return nil
}

// server finds id in the latest raft configuration.
func (n *Node) server(id string) (raft.Server, bool) {
	return configServer(n.group.Raft(), id)
}

// configServer is the server id of r's configuration.
func configServer(r *raft.Raft, id string) (raft.Server, bool) {
	f := r.GetConfiguration()
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
	n.gossip.SetLeaving()
	if n.group.Raft().State() == raft.Leader && n.voters() > 1 {
		if err := n.TransferLeadership(""); err != nil {
			n.log.Warn("leave: leadership transfer failed", "err", err)
		}
	}
	if err := n.gossip.Update(n.cfg.LeaderWait); err != nil {
		n.log.Warn("leave: gossip update failed", "err", err)
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
	if err := n.gossip.Leave(n.cfg.LeaderWait); err != nil {
		n.log.Warn("leave: gossip leave failed", "err", err)
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
	n.out.Abort()
	n.group.Forwarder().Close()
	n.closeRemoteGroups()
	n.replyConns.close()
	err := n.shutdownQueueGroups()
	if n.group != nil {
		if f := n.group.Shutdown(); f != nil {
			err = errors.Join(err, f.Error())
		}
	}
	if n.gossip != nil {
		n.gossip.Shutdown() // ends a join in progress
	}
	n.wg.Wait()
	n.group.Batcher().Wait()
	n.cleanup()
	return err
}

// cleanup releases what Start opened.
func (n *Node) cleanup() {
	if n.gossip != nil {
		n.gossip.Shutdown()
	}
	if n.group != nil && !n.closed {
		if f := n.group.Shutdown(); f != nil {
			_ = f.Error()
		}
	}
	n.closeQueueGroups()
	if n.trans != nil {
		_ = n.trans.Close()
		n.trans.CloseStreams()
	}
	if n.bulk != nil {
		n.bulk.Close()
	}
	if n.mux != nil {
		_ = n.mux.Close() // the raft listener
	}
	if n.group != nil {
		n.group.Close() // its body store and storage
	}
}

// LogEntries calls fn for each command entry still in the local raft log
// (entries compacted into a snapshot are gone), in index order, until fn
// returns false. It is meant for diagnostics and tests.
func (n *Node) LogEntries(fn func(index uint64, env *proto.Envelope) bool) error {
	return logEntries(n.group, fn)
}

// logEntries is LogEntries of group g's log.
func logEntries(g *group.Group, fn func(index uint64, env *proto.Envelope) bool) error {
	store := g.Storage().Store()
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
