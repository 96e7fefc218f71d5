package group

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/bodies"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	gproto "google.golang.org/protobuf/proto"
)

// EnvelopeVersion is the only Envelope format this node writes and reads.
const EnvelopeVersion = 1

// FSM is the raft.FSM (and raft.BatchingFSM) of a group: it decodes
// each entry as a proto.Envelope and applies it to the group's Machine
// under the state lock (State), hands the effects addressed to this node
// on, and writes and restores snapshots with the bodies they name
// (snapframe.go).
type FSM struct {
	nodeID    string
	run       string
	log       *slog.Logger
	state     *State
	applied   *AppliedIndex
	proposals *Proposals
	storage   *Storage
	bodies    *bodies.Store
	trailing  uint64
	closing   <-chan struct{}
	host      FSMHost
	// token marks the bodies this group appends to the snapshots it
	// sends (bodiesSnapshots).
	token [tokenLen]byte
	// snapLive is how many bodies the last snapshot named.
	snapLive atomic.Int64
	// reloc relocates a snapshot's bodies past its first step
	// (relocate.go); paceHook, if set, replaces the wait before each
	// step (tests).
	reloc    relocator
	paceHook func(n int64) bool
	// relocBytes is the bodies one relocation step copies at most
	// (relocateStepBytes; tests lower it).
	relocBytes int64
	// subs are the subscriptions of nodes that do not run the group,
	// by node (subscribe.go). Locks: the state lock.
	subs map[string]*Subscription
	// timeouts are the consumer timeouts the log decided for channels of
	// other nodes, the last of them (recentTimeouts), for their syncs
	// (subscribe.go). Locks: the state lock.
	timeouts recentTimeouts
	// replayTo is the last index of the log this process started with,
	// until the apply has passed it (0 then): the entries up to it that
	// are applied are counted as replayed (LogMeter.Replayed).
	replayTo atomic.Uint64
}

// FSMHost is what the state machine adapter asks of the node that runs
// the group. Every field may be nil (tests).
type FSMHost struct {
	// Effects is where the effects addressed to this node go now (nil:
	// nowhere).
	Effects func() fsm.Sink
	// Applying is told before each run of entries is applied.
	Applying func()
	// Fail is told that the log cannot be applied here (the adapter then
	// holds raft's apply loop until closing); Err is why, once it was.
	Fail func(err error)
	Err  func() error
}

// FSMConfig is what NewFSM builds the adapter of.
type FSMConfig struct {
	// NodeID is this node's: the effects of other nodes' channels are
	// not passed on.
	NodeID string
	// Run names this run of the node (NodeDown.run): its own release of
	// its previous runs closes none of its clients.
	Run    string
	Logger *slog.Logger
	// State, Applied and Proposals are the group's state, applied index
	// and the envelopes this node proposed.
	State     *State
	Applied   *AppliedIndex
	Proposals *Proposals
	// Storage and Bodies are the group's log and body store (nil in
	// tests that apply entries alone).
	Storage *Storage
	Bodies  *bodies.Store
	// TrailingLogs is raft's: the entries kept behind a snapshot.
	TrailingLogs uint64
	// Closing is closed when the node closes.
	Closing <-chan struct{}
	Host    FSMHost
}

// NewFSM returns the adapter, with a fresh token for the bodies its
// snapshots carry.
func NewFSM(c FSMConfig) *FSM {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &FSM{nodeID: c.NodeID, run: c.Run, log: c.Logger, state: c.State, applied: c.Applied, proposals: c.Proposals,
		storage: c.Storage, bodies: c.Bodies, trailing: c.TrailingLogs, closing: c.Closing, host: c.Host,
		token: newBodyToken(), relocBytes: relocateStepBytes}
}

var _ raft.BatchingFSM = (*FSM)(nil)

// Snapshots is the group's snapshot store as raft uses it: a snapshot of
// this group's own is opened with the bodies it names appended.
func (f *FSM) Snapshots(s *SnapshotStore) raft.SnapshotStore {
	return &bodiesSnapshots{SnapshotStore: s, store: f.bodies, token: f.token}
}

// SnapshotBodies is how many bodies the last snapshot named.
func (f *FSM) SnapshotBodies() int64 { return f.snapLive.Load() }

func (f *FSM) err() error {
	if f.host.Err == nil {
		return nil
	}
	return f.host.Err()
}

// DecodeEntry decodes a log entry and checks that this binary can apply
// every command of it. The bodies of its publishes alias l.Data, which
// nothing changes once raft has it.
func DecodeEntry(l *raft.Log) (*proto.Envelope, error) {
	env := &proto.Envelope{}
	if err := proto.UnmarshalEnvelope(l.Data, env); err != nil {
		return nil, fmt.Errorf("cluster: log entry %d is not an Envelope this version reads (%w): written by a newer version, or damaged; upgrade this node", l.Index, err)
	}
	if err := checkEnvelope(l.Index, env); err != nil {
		return nil, err
	}
	return env, nil
}

func checkEnvelope(index uint64, env *proto.Envelope) error {
	switch v := env.GetVersion(); {
	case v > EnvelopeVersion:
		return fmt.Errorf("cluster: log entry %d has envelope version %d and this version reads only %d: it was written by a newer version; upgrade this node",
			index, v, EnvelopeVersion)
	case v < EnvelopeVersion:
		return fmt.Errorf("cluster: log entry %d has envelope version %d, which no version of raftmq writes: the log is damaged", index, v)
	}
	if err := fsm.CheckEntry(fsm.Entry{Index: index, Envelope: env}); err != nil {
		return fmt.Errorf("cluster: %w; upgrade this node", err)
	}
	return nil
}

// ReplayUpTo has the entries up to last, the log this process started
// with, counted as replayed as they are applied. Before raft starts.
func (f *FSM) ReplayUpTo(last uint64) { f.replayTo.Store(last) }

// countReplayed tells the log's meter of the bytes of the entries among
// logs, just applied, that the log held when this process started. An
// entry a follower's new leader overwrote after the start is counted
// both appended and replayed: a conflicting tail, a few entries.
func (f *FSM) countReplayed(logs []*raft.Log) {
	to := f.replayTo.Load()
	if to == 0 || f.storage == nil {
		return
	}
	var n int64
	for _, l := range logs {
		if l.Index <= to {
			n += int64(len(l.Data))
		}
	}
	if logs[len(logs)-1].Index >= to {
		f.replayTo.Store(0)
	}
	f.storage.Meter().Replayed(n)
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM: it applies a run of committed
// entries under one acquisition of the state lock. An entry this binary
// cannot apply stops the node there: the entries before it are applied,
// the node reports the failure (Failed) and this call blocks until the
// node closes, so raft neither applies a later entry nor snapshots past
// the one this replica skipped. A replica must not diverge, and panicking
// instead only crash-loops on the same entry at every restart.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	envs := make([]*proto.Envelope, len(logs))
	local := make([]bool, len(logs))
	stop, decodeErr := len(logs), error(nil)
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if envs[i] = f.proposals.Take(l.Data); envs[i] != nil {
			local[i] = true
			continue
		}
		if envs[i], decodeErr = DecodeEntry(l); decodeErr != nil {
			stop = i
			break
		}
	}
	bb := &batchBodies{store: f.bodies, envs: map[uint64]*proto.Envelope{}}
	for i, l := range logs[:stop] {
		if envs[i] != nil {
			bb.envs[l.Index] = envs[i]
		}
	}
	if f.host.Applying != nil {
		f.host.Applying()
	}
	var next fsm.Sink
	if f.host.Effects != nil {
		next = f.host.Effects()
	}
	sink := &localSink{node: f.nodeID, run: f.run, next: next, bodies: bb, log: f.log, f: f}
	var last uint64
	f.state.mu.Lock()
	for i, l := range logs[:stop] {
		last = l.Index
		if envs[i] == nil {
			continue
		}
		sink.index = l.Index
		res := f.state.m.Apply(fsm.Entry{Index: l.Index, Envelope: envs[i]}, sink)
		for _, r := range res {
			if r != nil && r.Index == 0 {
				r.Index = l.Index
			}
			// A get's result leaves this node only if it proposed the
			// entry (a follower's get comes back through the leader).
			if g := r.GetGet(); g != nil && g.BodyIndex != 0 && local[i] {
				body, err := bb.read(queue.Body{Index: g.BodyIndex, Pos: g.BodyPos})
				if err != nil {
					f.log.Error("basic.get: the message body cannot be read", "err", err)
					gproto.Reset(r)
					r.Index, r.Code, r.Text = l.Index, replycode.InternalError, "INTERNAL_ERROR - the message body cannot be read on this node"
					continue
				}
				g.Body, g.BodyIndex, g.BodyPos = body, 0, 0
			}
		}
		out[i] = res
	}
	f.state.mu.Unlock()
	if stop > 0 {
		f.applied.Advance(last)
		f.countReplayed(logs[:stop])
	}
	if decodeErr != nil {
		if f.host.Fail != nil {
			f.host.Fail(decodeErr)
		}
		<-f.closing
	}
	return out
}

// Snapshot implements raft.FSM.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.err(); err != nil {
		return nil, fmt.Errorf("cluster: no snapshot of a node that stopped applying: %w", err)
	}
	if f.storage != nil {
		f.storage.Meter().Reset() // whatever triggered it (snapbytes.go)
	}
	f.state.mu.Lock()
	w, err := f.state.m.Snapshot()
	index := f.state.m.AppliedIndex()
	f.state.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot: %w", err)
	}
	return fsmSnapshot{w: w, f: f, index: index}, nil
}

// Restore implements raft.FSM: it builds a fresh Machine from the snapshot
// and swaps it in. A snapshot received from the leader carries the bodies
// it names, which go to the body store; one of this node's own names
// bodies its store must still hold.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.cancelRelocation()
	sr := &snapshotReader{r: bufio.NewReaderSize(rc, 64<<10)}
	checked := checkedOf(rc)
	var sizeHint int64
	if checked != nil {
		sizeHint = checked.stateSize()
	}
	state, framed, err := sr.state(sizeHint)
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	m := fsm.New()
	if err := m.RestoreBytes(state); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	// The file's sum, taken beside this read (snapopen.go), before a body
	// is stored or the state taken.
	if checked != nil {
		if err := checked.verify(); err != nil {
			return fmt.Errorf("cluster: restore: %w", err)
		}
	}
	if framed {
		if err := f.restoreBodies(sr, m.AppliedIndex()); err != nil {
			return fmt.Errorf("cluster: restore: %w", err)
		}
	}
	f.state.mu.Lock()
	m.KeepReleases(f.state.m)
	f.state.m = m
	f.endSubscriptions(ErrStateRestored)
	idx := m.AppliedIndex()
	f.state.mu.Unlock()
	f.applied.Advance(idx)
	// The snapshot read whole, grown by doubling, and its list of bodies
	// are free now: as large as the state, or twice.
	f.returnMemory()
	return nil
}

// checkedOf is the snapshot reader under rc if it is one whose sum a
// restore checks; raft hands Restore its reader wrapped in a counter.
func checkedOf(rc io.Reader) checkedSnapshot {
	for {
		switch r := rc.(type) {
		case checkedSnapshot:
			return r
		case interface{ WrappedReadCloser() io.ReadCloser }:
			rc = r.WrappedReadCloser()
		default:
			return nil
		}
	}
}

func (f *FSM) restoreBodies(sr *snapshotReader, index uint64) error {
	live, err := sr.bodyList()
	if err != nil {
		return err
	}
	follow, token, err := sr.follow()
	if err != nil {
		return err
	}
	store := f.bodies
	if store == nil {
		return nil
	}
	f.snapLive.Store(int64(len(live)))
	if follow && token != f.token {
		if err := importBodies(store, sr.r, live); err != nil {
			return err
		}
		// Every body the state names is in the body files now: the log
		// below the snapshot holds none of them.
		return store.Retain(live, index)
	}
	// The log from its first entry on is this node's own and holds what
	// it names; below it, the body files must.
	first, err := f.storage.Store().FirstIndex()
	if err != nil {
		return err
	}
	for _, l := range live {
		if (first == 0 || l.Index < first) && !store.Has(l.Key()) {
			return fmt.Errorf("the snapshot names the body of log entry %d (command %d), which this node no longer holds: %w", l.Index, l.Pos, bodies.ErrMissing)
		}
	}
	return nil
}

// fsmSnapshot writes the state and the list of the bodies it names; once
// written, the body store keeps those bodies readable past the log
// compaction raft does next.
type fsmSnapshot struct {
	w     io.WriterTo
	f     *FSM
	index uint64
}

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	var live []bodies.Live
	var outOfOrder int64
	if bl, ok := s.w.(fsm.BodyLister); ok {
		live, outOfOrder = liveBodies(bl)
	}
	if err := writeSnapshot(sink, s.w, live); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cluster: persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return err
	}
	if store := s.f.bodies; store != nil {
		// raft keeps TrailingLogs entries behind the snapshot; the
		// store relocates the live bodies of what it may delete, a
		// bounded step now and the rest paced (relocate.go).
		var to uint64
		if t := s.f.trailing; s.index > t {
			to = s.index - t
		}
		s.f.snapLive.Store(int64(len(live)))
		compact := s.f.holdDenseLog(live, outOfOrder, to, s.f.storage.WALBytes)
		s.f.retain(live, relocateTo(s.index, to, compact, outOfOrder), compact)
	}
	return nil
}

// Release ends the state machine's capture (its copied-on-write blocks
// and held table entries go back): raft calls it once, after Persist.
func (s fsmSnapshot) Release() {
	if r, ok := s.w.(fsm.Releaser); ok {
		r.Release()
	}
	s.f.returnMemory()
}

// returnAfterBodies is the size of snapshot, in bodies named, after which
// a node returns its free heap to the operating system.
const returnAfterBodies = 100_000

// returnMemory returns the heap a large snapshot left free to the
// operating system at once. Taking and persisting one (the list of
// bodies, the relocation's batches) and the traffic since the last leave
// tens of megabytes free, restoring one (read whole) hundreds; the
// runtime's scavenger gives such pages back over minutes, so a node's
// resident memory stayed near its peak (250 B per waiting delayed message
// after a fill, of which 100 B live). It costs a collection, once per
// large snapshot taken or restored, and those are minutes apart.
func (f *FSM) returnMemory() {
	if f.snapLive.Load() < returnAfterBodies {
		return
	}
	debug.FreeOSMemory()
}

// localSink passes on only the effects addressed to this node, with the
// bodies of its deliveries read.
type localSink struct {
	node   string
	run    string // this run of the node (FSMConfig.Run)
	next   fsm.Sink
	bodies *batchBodies
	log    *slog.Logger
	// f holds the subscriptions of nodes that do not run the group:
	// their channels' effects are queued for them (subscribe.go).
	f *FSM
	// index is the entry being applied.
	index uint64
}

// remote is the subscription of node, another node, nil if it has none.
func (s localSink) remote(node string) *Subscription {
	if node == s.node || s.f == nil || len(s.f.subs) == 0 {
		return nil
	}
	return s.f.subscriber(node)
}

// WantsDeliveries implements fsm.DeliveryFilter: the state machine builds
// no delivery for another node's consumer, but for one that subscribed.
func (s localSink) WantsDeliveries(c *proto.ConsumerRef) bool {
	node := c.GetChannel().GetNode()
	return s.next != nil && node == s.node || s.remote(node) != nil
}

func (s localSink) Deliver(d *fsm.Delivery) {
	node := d.Consumer.GetChannel().GetNode()
	sub := s.remote(node)
	if sub == nil && (s.next == nil || node != s.node) {
		return
	}
	if d.Body == nil && d.BodyRef.Size > 0 {
		b, err := s.bodies.read(d.BodyRef)
		if err != nil {
			// The consumer keeps the message unacknowledged until its
			// channel closes, which requeues it: better than a delivery
			// with the wrong bytes.
			s.log.Error("a delivery's message body cannot be read: not delivered", "consumer", d.Consumer.GetTag(), "err", err)
			return
		}
		d.Body = b
	}
	if sub != nil {
		sub.push(Effect{Deliver: d})
		return
	}
	s.next.Deliver(d)
}

func (s localSink) ConsumerCancelled(c *proto.ConsumerRef) {
	node := c.GetChannel().GetNode()
	if sub := s.remote(node); sub != nil {
		sub.push(Effect{Cancelled: c})
	} else if s.next != nil && node == s.node {
		s.next.ConsumerCancelled(c)
	}
}

func (s localSink) ChannelTimedOut(ch *proto.ChannelRef, timeout int64) {
	if ch.GetNode() != s.node && s.f != nil {
		s.f.timeouts.add(RecentTimeout{Index: s.index, Effect: Effect{ChannelTimedOut: ch, Timeout: timeout}})
	}
	if sub := s.remote(ch.GetNode()); sub != nil {
		sub.push(Effect{ChannelTimedOut: ch, Timeout: timeout})
	} else if s.next != nil && ch.GetNode() == s.node {
		s.next.ChannelTimedOut(ch, timeout)
	}
}

func (s localSink) ConsumerTimedOut(c *proto.ConsumerRef, timeout int64, tags []uint64) {
	node := c.GetChannel().GetNode()
	if node != s.node && s.f != nil {
		s.f.timeouts.add(RecentTimeout{Index: s.index, Effect: Effect{ConsumerTimedOut: c, Timeout: timeout, Tags: tags}})
	}
	if sub := s.remote(node); sub != nil {
		sub.push(Effect{ConsumerTimedOut: c, Timeout: timeout, Tags: tags})
	} else if s.next != nil && node == s.node {
		s.next.ConsumerTimedOut(c, timeout, tags)
	}
}

// VhostDeleted passes on to this node's clients: every node runs the
// metadata log that says it.
func (s localSink) VhostDeleted(name string) {
	if a, ok := s.next.(fsm.AccessSink); ok {
		a.VhostDeleted(name)
	}
}

// UserDeleted passes on as VhostDeleted.
func (s localSink) UserDeleted(name string) {
	if a, ok := s.next.(fsm.AccessSink); ok {
		a.UserDeleted(name)
	}
}

func (s localSink) NodeDown(node string) {
	if sub := s.remote(node); sub != nil {
		sub.push(Effect{NodeDown: node})
	} else if s.next != nil && node == s.node {
		// Rare, and it closes every client of the node: the log line
		// names the entry it came from.
		if s.log != nil {
			s.log.Info("applied a NodeDown of this node", "index", s.index)
		}
		s.next.NodeDown(node)
	}
}

// NodeReleased implements fsm.ReleaseSink: a node's release of its
// previous runs goes to its stream as it is, and to this node's clients
// as a NodeDown unless this run made it.
func (s localSink) NodeReleased(node, run string) {
	if sub := s.remote(node); sub != nil {
		sub.push(Effect{NodeDown: node, Run: run})
	} else if node == s.node && run != s.run {
		s.NodeDown(node)
	}
}

// AppliedIndex tracks the highest log index the local state machine has
// applied and wakes whoever waits for it.
type AppliedIndex struct {
	mu    sync.Mutex
	index uint64
	ch    chan struct{} // closed and replaced on every advance
}

// NewAppliedIndex is an index at 0.
func NewAppliedIndex() *AppliedIndex { return &AppliedIndex{ch: make(chan struct{})} }

// Advance raises the index to i (never lowers it) and wakes the waiters.
func (a *AppliedIndex) Advance(i uint64) {
	a.mu.Lock()
	if i > a.index {
		a.index = i
	}
	close(a.ch)
	a.ch = make(chan struct{})
	a.mu.Unlock()
}

// Load returns the applied index and a channel closed at the next advance.
func (a *AppliedIndex) Load() (uint64, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.index, a.ch
}

// Wait blocks until the applied index reaches i; ErrClosed once closing
// closes.
func (a *AppliedIndex) Wait(ctx context.Context, closing <-chan struct{}, i uint64) error {
	for {
		cur, ch := a.Load()
		if cur >= i {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-closing:
			return ErrClosed
		}
	}
}
