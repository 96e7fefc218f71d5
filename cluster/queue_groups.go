package cluster

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/broadcast"
	"github.com/raftmq/raftmq/proto"
)

// ErrNoSuchGroup is returned for a group this node does not run.
var ErrNoSuchGroup = errors.New("cluster: no such group on this node")

// queueGroups is the node's queue groups: those the metadata log names
// (fsm QueueGroups) with this node among their members, each a Raft
// group of its own in groups/<id>/ on its layer of the node's one raft
// port (mux). The metadata group is the node's group, not one of these.
type queueGroups struct {
	// mux shares the node's raft listener among its groups; the
	// metadata group has its headerless layer.
	mux *group.Mux
	// bulk carries the metadata group's large entries beside their
	// appends, on its own layer of the mux (group/bulk.go).
	bulk *group.Bulk

	qmu     sync.Mutex
	byID    map[string]*queueGroup
	qclosed bool // the node is closing: no group opens any more
	// remote are the ways into queue groups the metadata log names
	// and this node does not run, by id, made on first use
	// (remote_groups.go).
	remote map[string]*remoteGroup
	// remoteAdded tells steerRemoteGroups of a new entry in remote.
	remoteAdded chan struct{}
	// leadsKick asks gossipLeads to gossip the groups this node leads
	// (group_leads.go).
	leadsKick chan struct{}
	// regroup asks runQueueGroups for a round now: a group's steering
	// learned that its leader removed this node.
	regroup chan struct{}
}

// queueGroup is one queue group this node runs.
type queueGroup struct {
	id      string
	g       *group.Group
	trans   *raft.NetworkTransport
	bulk    *group.Bulk // its large entries beside their appends
	notify  chan bool
	leading atomic.Bool // a leader whose barrier passed
	// dropped is set once the group's leader answered that this node is
	// no voter of the group's committed configuration (askDropped).
	dropped atomic.Bool
	changed *broadcast.Broadcast // leader or readiness changed
	// stop is closed to close this group alone (the node left its
	// members); closing when stop or the node's closing is, for the
	// group's goroutines.
	stop, closing chan struct{}
	// steer asks the group's steering (steerLoop) for a round now.
	steer chan struct{}
	wg    sync.WaitGroup // followQueueGroup, steerLoop and SnapshotAfterReplay
}

// closeLinks closes the group's transport and bulk layer.
func (qg *queueGroup) closeLinks() {
	_ = qg.trans.Close()
	qg.trans.CloseStreams()
	if qg.bulk != nil {
		qg.bulk.Close()
	}
}

// kick asks qg's steering for a round.
func (qg *queueGroup) kick() {
	select {
	case qg.steer <- struct{}{}:
	default:
	}
}

// queueTransport is raft's network transport on a queue group's layer,
// whose RPCs come through rpcs (the gap mend).
type queueTransport struct {
	group.NoPipeline
	rpcs <-chan raft.RPC
}

// Consumer implements raft.Transport.
func (t queueTransport) Consumer() <-chan raft.RPC { return t.rpcs }

// runQueueGroups opens the queue groups the metadata log names with this
// node as a member, as their entry applies (also when a restarted node
// replays it), and closes those it no longer names it in once the
// group's configuration no longer holds the node (the group's leader
// removed it), until the node closes. Every round asks each running
// group's steering to follow the log's members.
func (n *Node) runQueueGroups() {
	defer n.wg.Done()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		_, applied := n.group.Applied().Load()
		var specs []fsm.QueueGroup
		n.View(func(m *fsm.Machine) { specs = m.QueueGroups() })
		if len(specs) > 0 {
			// Before any group opens, which takes a while: until it is
			// set, the broker sends every command to the metadata log,
			// so a queue's declare would not wait for its group to hold
			// it and a consume of a placed queue would be refused.
			n.named.Store(true)
		}
		voter := n.metadataVoter()
		for _, s := range specs {
			if !voter || !s.HasMember(n.cfg.NodeID) || n.queueGroup(s.ID) != nil {
				continue
			}
			if err := n.openQueueGroup(s); err != nil {
				n.log.Error("cannot open a queue group", "group", s.ID, "err", err)
			}
		}
		n.followRemoteGroups(specs)
		for _, qg := range n.runningQueueGroups() {
			i := slices.IndexFunc(specs, func(s fsm.QueueGroup) bool { return s.ID == qg.id })
			switch {
			case voter && i >= 0 && specs[i].HasMember(n.cfg.NodeID):
				qg.kick()
			case qg.removed(n.cfg.NodeID, time.Duration(removedQuiet.Load())*n.cfg.ElectionTimeout, n.ledElsewhere(specOf(specs, i))):
				n.closeQueueGroup(qg)
			default:
				// Its leader has yet to remove this node (or it is
				// the leader, and hands over first).
				qg.kick()
			}
		}
		n.dropRemoteGroups(specs)
		// Look again in a second as well: a group that failed to open,
		// one the node is to close, and the node's own suffrage in
		// the metadata group (which no entry applies) are not waited on.
		retry.Reset(time.Second)
		select {
		case <-applied:
		case <-retry.C:
		case <-n.regroup:
		case <-n.closing:
			return
		}
	}
}

func (n *Node) queueGroup(id string) *queueGroup {
	n.qmu.Lock()
	defer n.qmu.Unlock()
	return n.byID[id]
}

// openQueueGroup opens and starts the queue group s on this node, and
// bootstraps it with its members when it has no raft state yet and s
// has the members it was created with (epoch 0): every such member
// bootstraps the same configuration, read from the log, which
// hashicorp/raft allows.
func (n *Node) openQueueGroup(s fsm.QueueGroup) error {
	cfg := &n.cfg
	dir, err := group.Dir(cfg.DataDir, s.ID)
	if err != nil {
		return err
	}
	qg := &queueGroup{id: s.ID, notify: make(chan bool, 16), changed: broadcast.New(),
		stop: make(chan struct{}), closing: make(chan struct{}), steer: make(chan struct{}, 1)}
	go func() {
		select {
		case <-n.closing:
		case <-qg.stop:
		}
		close(qg.closing)
	}()
	fail := func() { close(qg.stop); qg.g.Close() }
	log := n.log.With("group", s.ID)
	hlog := newHCLogger(log.With("subsystem", "raft"))
	qg.g, err = group.Open(group.Config{
		ID:      cfg.NodeID,
		GroupID: s.ID,
		Dir:     dir,
		Storage: group.StorageOptions{LogStore: cfg.LogStore, SnapshotBytes: cfg.SnapshotBytes, InlineMax: cfg.inlineMax},
		Raft:    n.raftTimings(),
		// A queue group's threshold scales with its messages as the
		// metadata group's does.
		ScaleSnapshotThreshold: cfg.scaleSnapshotThreshold,
		NotifyCh:               qg.notify,
		Logger:                 log,
		RaftLogger:             hlog,
		FSM: group.FSMConfig{NodeID: cfg.NodeID, Run: n.run, Logger: log,
			Host: group.FSMHost{Effects: n.effects, Fail: n.fail, Err: n.Err}},
		Pipeline: n.pipeline(qg.leading.Load, qg.changed.Wait, func(ctx context.Context, deadline time.Time) (group.Target, error) {
			return n.awaitLeader(ctx, deadline, qg.g, qg.leading.Load, qg.changed, qg.closing)
		}),
		Closing: qg.closing,
	})
	if err != nil {
		fail()
		return err
	}
	layer, err := n.mux.Layer(s.ID)
	if err != nil {
		fail()
		return err
	}
	qg.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 3, Timeout: 10 * time.Second, Logger: hlog,
	})
	bulkLayer, err := n.mux.Layer(group.BulkLayerID(s.ID))
	if err != nil {
		qg.closeLinks()
		fail()
		return err
	}
	qg.bulk = group.NewBulk(group.BulkConfig{Layer: bulkLayer, MaxEntry: group.MaxBulkEntry, Timeout: 10 * time.Second, Logger: log})
	qg.g.UseBulk(qg.bulk)
	n.qmu.Lock()
	defer n.qmu.Unlock()
	if n.qclosed {
		qg.closeLinks()
		fail()
		return ErrClosed
	}
	had, err := qg.g.Start(qg.trans.Consumer(), func(rpcs <-chan raft.RPC) raft.Transport {
		return queueTransport{qg.g.Appends(qg.trans, qg.bulk), rpcs}
	}, qg.closing)
	if err != nil {
		if f := qg.g.Shutdown(); f != nil {
			_ = f.Error()
		}
		qg.closeLinks()
		fail()
		return err
	}
	if n.byID == nil {
		n.byID = map[string]*queueGroup{}
	}
	n.byID[s.ID] = qg
	// Only the members the group was created with bootstrap it, each
	// with the same configuration; a member named later starts empty
	// and waits for the group's leader to add it.
	if !had && s.Epoch == 0 {
		servers := make([]raft.Server, 0, len(s.Members))
		for _, m := range s.Members {
			servers = append(servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Addr)})
		}
		f := qg.g.Raft().BootstrapCluster(raft.Configuration{Servers: servers})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			log.Warn("bootstrapping the queue group failed", "err", err)
		}
	}
	qg.wg.Add(2)
	go n.followQueueGroup(qg)
	go n.steerLoop(qg)
	if had {
		// A queue group's log is where a crash-looping node's messages
		// are: its replay is bounded as the metadata group's is.
		qg.wg.Add(1)
		go func() {
			defer qg.wg.Done()
			qg.g.SnapshotAfterReplay(qg.closing)
		}()
	}
	qg.g.Batcher().Run()
	qg.g.RunSnapshots(qg.closing)
	log.Info("queue group started", "members", s.Members, "epoch", s.Epoch, "had_state", had)
	return nil
}

// removedQuiet is how many election timeouts of silence removed waits
// for; tests lengthen it to see the leader's answer alone.
var removedQuiet atomic.Int64

func init() { removedQuiet.Store(10) }

// removed reports whether this node, which the log no longer names among
// the group's members, may close its copy: the group's configuration as
// it knows it no longer holds the node as a voter (its leader removed
// it), the group's leader said so (askDropped), its raft stopped, or,
// not leading, it has heard from no leader
// for quiet while another member leads the group (ledElsewhere, given
// the term this node knows). The leader sends a removed follower the
// entry that removes it as it stops replicating to it, but that send may
// fail (the follower just got a new leader, which removes it at once);
// the follower then hears no more from any leader. Silence alone is no
// removal: while the group elects (a loaded machine, a partition) its
// configuration may still count this node, and closing the copies of
// two of three voters that the log no longer names left the group
// without a quorum for good, before its leader could add the new ones.
func (qg *queueGroup) removed(id string, quiet time.Duration, ledElsewhere func(term uint64) bool) bool {
	r := qg.g.Raft()
	if r.State() == raft.Shutdown || qg.dropped.Load() {
		return true
	}
	if r.State() != raft.Leader && time.Since(r.LastContact()) > quiet && ledElsewhere(r.CurrentTerm()) {
		return true
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	return !slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool {
		return string(s.ID) == id && s.Suffrage == raft.Voter
	})
}

// ledElsewhere reports whether a member of spec other than this node
// leads the group, as gossip tells, in term or a later one: a leader
// whose claim is older than the term this node knows may have lost the
// group in an election since. A spec without members (a group the log
// does not name) is led by none.
func (n *Node) ledElsewhere(spec fsm.QueueGroup) func(term uint64) bool {
	return func(term uint64) bool {
		leader, claimed := gossipedLeader(spec, n.members.All())
		return leader != "" && leader != n.cfg.NodeID && claimed >= term
	}
}

// specOf is specs[i], or no group for i < 0.
func specOf(specs []fsm.QueueGroup, i int) fsm.QueueGroup {
	if i < 0 {
		return fsm.QueueGroup{}
	}
	return specs[i]
}

// closeQueueGroup closes a queue group this node no longer is a member
// of, while the node runs on. Its directory stays: should the node be
// named again, its log is a start the leader catches up from.
func (n *Node) closeQueueGroup(qg *queueGroup) {
	n.qmu.Lock()
	if n.byID[qg.id] != qg {
		n.qmu.Unlock()
		return
	}
	delete(n.byID, qg.id)
	n.qmu.Unlock()
	close(qg.stop)
	qg.g.Forwarder().Leave(n.cfg.LeaderWait)
	if f := qg.g.Shutdown(); f != nil {
		_ = f.Error()
	}
	qg.wg.Wait()
	qg.g.Batcher().Wait()
	qg.closeLinks()
	qg.g.Close()
	n.leadsChanged()
	n.log.Info("queue group closed: this node is no longer a member", "group", qg.id)
}

// followQueueGroup follows a queue group's leadership: once this node
// leads it and its barrier has passed, the node's stamper is raised to
// the group's log clock and the group takes commands; a follower's
// forwarding stream follows the leader raft reports.
func (n *Node) followQueueGroup(qg *queueGroup) {
	defer qg.wg.Done()
	r := qg.g.Raft()
	obs, stop := group.Observe[raft.LeaderObservation](r, 16)
	defer stop()
	var endTerm func() // ends the duties of this node's term as leader
	stopDuties := func() {
		if endTerm != nil {
			endTerm()
			endTerm = nil
		}
	}
	defer stopDuties()
	for {
		select {
		case isLeader := <-qg.notify:
			if !isLeader {
				stopDuties()
				qg.leading.Store(false)
				qg.changed.Signal()
				n.leadsChanged()
				continue
			}
			ctx, cancel := n.untilClosed(context.Background())
			if err := n.groupBarrier(ctx, qg); err != nil {
				cancel()
				continue
			}
			qg.kick()
			var clock int64
			qg.g.State().View(func(m *fsm.Machine) { clock = m.Clock() })
			started := n.clocks.StartGroupTerm(ctx, clock)
			cancel()
			if !started {
				continue
			}
			qg.g.Forwarder().Retire()
			qg.leading.Store(r.State() == raft.Leader)
			if qg.leading.Load() {
				stopDuties()
				endTerm = n.runGroupDuties(qg, n.clusterWasDown(r, clock))
			}
			qg.changed.Signal()
			n.leadsChanged()
		case ob := <-obs:
			if lo, ok := ob.Data.(raft.LeaderObservation); ok {
				qg.g.Forwarder().LeaderChanged(string(lo.LeaderID))
			}
			qg.changed.Signal()
		case <-qg.closing:
			return
		}
	}
}

// groupBarrier waits, as a new leader of qg, until everything committed
// before its term is applied, asking again while the node still leads:
// a barrier refused as a leadership transfer starts (a rebalance's hand-
// back that may then fail) or not taken within LeaderWait would leave a
// leader that keeps its place unready, every command of the group
// waiting for a leader, until the leadership moved. It returns nil once
// a barrier passed, or the error of the last one once the node no longer
// leads or ctx ends.
func (n *Node) groupBarrier(ctx context.Context, qg *queueGroup) error {
	r := qg.g.Raft()
	for {
		err := n.await(ctx, (*barrierOf.Load())(r, n.cfg.LeaderWait))
		if err == nil {
			return nil
		}
		n.log.Warn("queue group barrier failed", "group", qg.id, "err", err)
		if r.State() != raft.Leader || !sleepCtx(ctx, barrierRetry) {
			return err
		}
	}
}

// barrierRetry is how long a leader waits to ask for its barrier again.
const barrierRetry = 100 * time.Millisecond

// barrierOf holds the barrier a new queue group leader asks raft for;
// tests make it fail.
var barrierOf atomic.Pointer[func(r *raft.Raft, timeout time.Duration) raft.Future]

func init() {
	f := func(r *raft.Raft, timeout time.Duration) raft.Future { return r.Barrier(timeout) }
	barrierOf.Store(&f)
}

// runGroupDuties runs, on the group's leader, the duties that fall due
// on the group's log clock (dueDuties: deaths, leases, consumer timeouts,
// delayed releases of its queues), decided in the group's own log as the
// metadata leader decides them in its, the hand-off of its outbox
// (handOffLoop) and the mirror of what the metadata placed in it
// (mirrorLoop), each on its own goroutine. The
// function it returns ends them and waits for them to return; so does
// the group's closing. After a whole-cluster stop (wasDown) the duties
// start once the group's leases restarted, as the metadata's do: a
// placed queue's lease (fsm lease.go) only runs while the cluster is up.
func (n *Node) runGroupDuties(qg *queueGroup, wasDown bool) func() {
	ctx, cancel := n.untilClosed(context.Background())
	var wg sync.WaitGroup
	duties := append(n.dueDuties(qg.g), func(ctx context.Context) { n.handOffLoop(ctx, qg.g) },
		func(ctx context.Context) { n.mirrorLoop(ctx, qg) })
	wg.Add(1)
	go func() {
		defer wg.Done()
		if wasDown && !n.restartLeasesIn(ctx, qg.g) {
			return
		}
		for _, duty := range duties {
			wg.Add(1) // the count is above 0 here: this goroutine holds one
			go func() {
				defer wg.Done()
				duty(ctx)
			}()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-qg.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// SubmitGroup is SubmitBatch into the log of group id: the metadata
// group for group.DefaultID, else a queue group this node runs (forwarded
// to its leader, the group's id on the stream), else one the metadata
// log names: forwarded to its leader from outside the group
// (remote_groups.go), the results returned once the group committed
// them, since nothing applies them here. ErrNoSuchGroup is for a group
// the metadata log does not name.
func (n *Node) SubmitGroup(ctx context.Context, id string, cmds []*proto.Command) ([]*proto.Result, error) {
	if id == group.DefaultID {
		return n.SubmitBatch(ctx, cmds)
	}
	var left *queueGroup
	for {
		if qg := n.queueGroup(id); qg != nil && qg != left {
			res, err := qg.g.Submitter().SubmitBatch(ctx, cmds)
			if !errors.Is(err, ErrClosed) || errors.Is(err, ErrOutcomeUnknown) {
				return res, err
			}
			select {
			case <-n.closing:
				return res, err
			default:
			}
			select {
			case <-qg.stop:
				// The node left the group before the commands
				// reached its log: they go to the group's leader
				// from outside.
				left = qg
				continue
			default:
				return res, err
			}
		}
		res, err := n.submitRemote(ctx, id, cmds)
		if err == nil {
			n.committedRemote(id, cmds, res)
		}
		if !errors.Is(err, errRemoteDropped) {
			return res, err
		}
		// Nothing was sent: the node runs the group now, or the log
		// no longer names it.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		select {
		case <-n.closing:
			return nil, ErrClosed
		default:
		}
	}
}

// ViewGroup runs fn on the state machine of group id as this node has
// applied it (the metadata group for group.DefaultID), as View does for
// the metadata group; it reports false, without calling fn, for a queue
// group this node does not run.
func (n *Node) ViewGroup(id string, fn func(m *fsm.Machine)) bool {
	if id == group.DefaultID {
		n.View(fn)
		return true
	}
	qg := n.queueGroup(id)
	if qg == nil {
		return false
	}
	qg.g.State().View(fn)
	return true
}

// runningQueueGroups are the queue groups this node runs, by id.
func (n *Node) runningQueueGroups() []*queueGroup {
	n.qmu.Lock()
	qgs := make([]*queueGroup, 0, len(n.byID))
	for _, qg := range n.byID {
		qgs = append(qgs, qg)
	}
	n.qmu.Unlock()
	slices.SortFunc(qgs, func(a, b *queueGroup) int { return strings.Compare(a.id, b.id) })
	return qgs
}

// shutdownQueueGroups stops the queue groups' raft and forwarding; the
// node is closing, so no more open.
func (n *Node) shutdownQueueGroups() error {
	n.qmu.Lock()
	n.qclosed = true
	n.qmu.Unlock()
	qgs := n.runningQueueGroups()
	var err error
	for _, qg := range qgs {
		qg.g.Forwarder().Close()
		if f := qg.g.Shutdown(); f != nil {
			err = errors.Join(err, f.Error())
		}
	}
	return err
}

// closeQueueGroups waits for the queue groups' goroutines and closes
// their transports and storage, once they are shut down and the node's
// goroutines have ended.
func (n *Node) closeQueueGroups() {
	n.qmu.Lock()
	n.qclosed = true
	qgs := n.byID
	n.byID = nil
	n.qmu.Unlock()
	for _, qg := range qgs {
		qg.wg.Wait()
		qg.g.Batcher().Wait()
		qg.closeLinks()
		qg.g.Close()
	}
}

// proposeQueueGroups proposes, on the metadata leader, the queue groups
// that --queue-groups asks for (wantQueueGroups: with per-node, one more
// as each node joins past the third) and the log does not hold yet, once the
// log is at the level that knows them (every server announced it). The
// new groups' members are spread over the voters with the groups the log
// holds (fsm.SpreadGroups: fsm.GroupSize members, or every voter when
// there are fewer, members and would-be leaders, the first member,
// spread evenly).
func (n *Node) proposeQueueGroups(ctx context.Context) {
	if n.cfg.QueueGroups == 0 && !n.cfg.QueueGroupsPerNode {
		return
	}
	var level uint32
	var have []fsm.QueueGroup
	n.View(func(m *fsm.Machine) { level, have = m.ProtocolLevel(), m.QueueGroups() })
	if level < fsm.QueueGroupLevel {
		return
	}
	voters := n.metadataVoters()
	want := wantQueueGroups(n.cfg.QueueGroups, n.cfg.QueueGroupsPerNode, len(voters))
	if len(have) >= want || len(voters) == 0 {
		return
	}
	gs := slices.Clone(have)
	for i := len(have); i < want; i++ {
		gs = append(gs, fsm.QueueGroup{ID: queueGroupID(i)})
	}
	if placed := n.placementVoters(); len(placed) > 0 {
		voters = placed
	}
	cmd := &proto.QueueGroups{}
	for _, s := range fsm.SpreadGroups(gs, voters) {
		if slices.ContainsFunc(have, func(h fsm.QueueGroup) bool { return h.ID == s.ID }) {
			continue // spreadQueueGroups moves the groups the log holds
		}
		g := &proto.QueueGroup{Id: s.ID}
		for _, m := range s.Members {
			g.Members = append(g.Members, &proto.QueueGroupMember{Id: m.ID, Addr: m.Addr})
		}
		cmd.Groups = append(cmd.Groups, g)
	}
	res, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_QueueGroups{QueueGroups: cmd}})
	switch {
	case err != nil:
		n.log.Warn("proposing the queue groups failed", "err", err)
	case res.GetCode() != 0:
		n.log.Warn("queue groups refused", "code", res.GetCode(), "text", res.GetText())
	default:
		n.log.Info("created queue groups", "from", len(have), "to", want, "index", res.GetIndex())
	}
}

// MinQueueGroupsPerNode is the least number of queue groups
// QueueGroupsPerNode asks for: three, so that a cluster of one or two
// nodes grown to three has as many groups as one started with three.
const MinQueueGroupsPerNode = 3

// wantQueueGroups is how many queue groups a cluster of voters metadata
// voters should run: fixed, or with perNode one per voter and at least
// MinQueueGroupsPerNode if that is more; never more than
// fsm.MaxQueueGroups.
func wantQueueGroups(fixed int, perNode bool, voters int) int {
	if perNode {
		fixed = max(fixed, voters, MinQueueGroupsPerNode)
	}
	return min(fixed, fsm.MaxQueueGroups)
}

// metadataVoters are the voters of the metadata group with their raft
// addresses, in id order: the nodes queue groups are spread over.
func (n *Node) metadataVoters() []fsm.GroupMember {
	f := n.group.Raft().GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var voters []fsm.GroupMember
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, fsm.GroupMember{ID: string(s.ID), Addr: string(s.Address)})
		}
	}
	slices.SortFunc(voters, func(a, b fsm.GroupMember) int { return strings.Compare(a.ID, b.ID) })
	return voters
}

// placementVoters are the metadata voters that the queue groups' members
// are chosen from: every one but those shrunk out of the queue groups
// (roster.shrunk).
func (n *Node) placementVoters() []fsm.GroupMember {
	return slices.DeleteFunc(n.metadataVoters(), func(v fsm.GroupMember) bool {
		_, out := n.shrunk.Load(v.ID)
		return out
	})
}

// queueGroupID names the i-th queue group (from 0): q1, q2, ...
func queueGroupID(i int) string { return "q" + strconv.Itoa(i+1) }
