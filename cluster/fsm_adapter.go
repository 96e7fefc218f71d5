package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/bodies"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	gproto "google.golang.org/protobuf/proto"
)

// envelopeVersion is the only Envelope format this node writes and reads.
const envelopeVersion = 1

// fsmAdapter is the raft.FSM (and raft.BatchingFSM) of a node: it decodes
// each entry as a proto.Envelope and applies it to the node's Machine under
// the node's state lock. It holds no state of its own.
type fsmAdapter struct {
	n *Node
}

var _ raft.BatchingFSM = (*fsmAdapter)(nil)

// decodeEntry decodes a log entry and checks that this binary can apply
// every command of it.
func decodeEntry(l *raft.Log) (*proto.Envelope, error) {
	env := &proto.Envelope{}
	if err := gproto.Unmarshal(l.Data, env); err != nil {
		return nil, fmt.Errorf("cluster: log entry %d is not an Envelope this version reads (%w): written by a newer version, or damaged; upgrade this node", l.Index, err)
	}
	if err := checkEnvelope(l.Index, env); err != nil {
		return nil, err
	}
	return env, nil
}

func checkEnvelope(index uint64, env *proto.Envelope) error {
	switch v := env.GetVersion(); {
	case v > envelopeVersion:
		return fmt.Errorf("cluster: log entry %d has envelope version %d and this version reads only %d: it was written by a newer version; upgrade this node",
			index, v, envelopeVersion)
	case v < envelopeVersion:
		return fmt.Errorf("cluster: log entry %d has envelope version %d, which no version of raftmq writes: the log is damaged", index, v)
	}
	if err := fsm.CheckEntry(fsm.Entry{Index: index, Envelope: env}); err != nil {
		return fmt.Errorf("cluster: %w; upgrade this node", err)
	}
	return nil
}

// Apply implements raft.FSM.
func (a *fsmAdapter) Apply(l *raft.Log) any {
	return a.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM: it applies a run of committed
// entries under one acquisition of the state lock. An entry this binary
// cannot apply stops the node there: the entries before it are applied,
// the node reports the failure (Failed) and this call blocks until the
// node closes, so raft neither applies a later entry nor snapshots past
// the one this replica skipped. A replica must not diverge, and panicking
// instead only crash-loops on the same entry at every restart.
func (a *fsmAdapter) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	envs := make([]*proto.Envelope, len(logs))
	local := make([]bool, len(logs))
	stop, decodeErr := len(logs), error(nil)
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if envs[i] = a.n.proposals.take(l.Data); envs[i] != nil {
			local[i] = true
			continue
		}
		if envs[i], decodeErr = decodeEntry(l); decodeErr != nil {
			stop = i
			break
		}
	}
	n := a.n
	bb := &batchBodies{store: n.bodies, envs: map[uint64]*proto.Envelope{}}
	for i, l := range logs[:stop] {
		if envs[i] != nil {
			bb.envs[l.Index] = envs[i]
		}
	}
	n.checkStall(time.Now())
	sink := localSink{node: n.cfg.NodeID, next: n.effects(), bodies: bb, log: n.log}
	var last uint64
	n.stateMu.Lock()
	for i, l := range logs[:stop] {
		last = l.Index
		if envs[i] == nil {
			continue
		}
		res := n.machine.Apply(fsm.Entry{Index: l.Index, Envelope: envs[i]}, sink)
		for _, r := range res {
			if r != nil && r.Index == 0 {
				r.Index = l.Index
			}
			// A get's result leaves this node only if it proposed the
			// entry (a follower's get comes back through the leader).
			if g := r.GetGet(); g != nil && g.BodyIndex != 0 && local[i] {
				body, err := bb.read(queue.Body{Index: g.BodyIndex, Pos: g.BodyPos})
				if err != nil {
					n.log.Error("basic.get: the message body cannot be read", "err", err)
					gproto.Reset(r)
					r.Index, r.Code, r.Text = l.Index, replycode.InternalError, "INTERNAL_ERROR - the message body cannot be read on this node"
					continue
				}
				g.Body, g.BodyIndex, g.BodyPos = body, 0, 0
			}
		}
		out[i] = res
	}
	n.stateMu.Unlock()
	if stop > 0 {
		n.applied.advance(last)
	}
	if decodeErr != nil {
		n.fail(decodeErr)
		<-n.closing
	}
	return out
}

// Snapshot implements raft.FSM.
func (a *fsmAdapter) Snapshot() (raft.FSMSnapshot, error) {
	if err := a.n.Err(); err != nil {
		return nil, fmt.Errorf("cluster: no snapshot of a node that stopped applying: %w", err)
	}
	a.n.logBytes.reset() // whatever triggered it (snapbytes.go)
	a.n.stateMu.Lock()
	w, err := a.n.machine.Snapshot()
	index := a.n.machine.AppliedIndex()
	a.n.stateMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot: %w", err)
	}
	return fsmSnapshot{w: w, n: a.n, index: index}, nil
}

// Restore implements raft.FSM: it builds a fresh Machine from the snapshot
// and swaps it in. A snapshot received from the leader carries the bodies
// it names, which go to the body store; one of this node's own names
// bodies its store must still hold.
func (a *fsmAdapter) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	sr := &snapshotReader{r: bufio.NewReaderSize(rc, 64<<10)}
	state, framed, err := sr.state()
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	m := fsm.New()
	if err := m.RestoreBytes(state); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	if framed {
		if err := a.restoreBodies(sr, m.AppliedIndex()); err != nil {
			return fmt.Errorf("cluster: restore: %w", err)
		}
	}
	a.n.stateMu.Lock()
	m.KeepReleases(a.n.machine)
	a.n.machine = m
	idx := m.AppliedIndex()
	a.n.stateMu.Unlock()
	a.n.applied.advance(idx)
	// The snapshot read whole, grown by doubling, and its list of bodies
	// are free now: as large as the state, or twice.
	a.n.returnMemory()
	return nil
}

func (a *fsmAdapter) restoreBodies(sr *snapshotReader, index uint64) error {
	live, err := sr.bodyList()
	if err != nil {
		return err
	}
	follow, token, err := sr.follow()
	if err != nil {
		return err
	}
	store := a.n.bodies
	if store == nil {
		return nil
	}
	a.n.snapLive.Store(int64(len(live)))
	if follow && token != a.n.bodyToken {
		if err := importBodies(store, sr.r, live); err != nil {
			return err
		}
		// Every body the state names is in the body files now: the log
		// below the snapshot holds none of them.
		return store.Retain(live, index)
	}
	// The log from its first entry on is this node's own and holds what
	// it names; below it, the body files must.
	first, err := a.n.store.FirstIndex()
	if err != nil {
		return err
	}
	for _, l := range live {
		if (first == 0 || l.Key.Index < first) && !store.Has(l.Key) {
			return fmt.Errorf("the snapshot names the body of log entry %d (command %d), which this node no longer holds: %w", l.Key.Index, l.Key.Pos, bodies.ErrMissing)
		}
	}
	return nil
}

// fsmSnapshot writes the state and the list of the bodies it names; once
// written, the body store keeps those bodies readable past the log
// compaction raft does next.
type fsmSnapshot struct {
	w     io.WriterTo
	n     *Node
	index uint64
}

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	var live []bodies.Live
	if bl, ok := s.w.(fsm.BodyLister); ok {
		live = toLive(bl.Bodies())
	}
	if err := writeSnapshot(sink, s.w, live); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cluster: persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return err
	}
	if store := s.n.bodies; store != nil {
		// raft keeps TrailingLogs entries behind the snapshot; the
		// store relocates the live bodies of what it may delete.
		var to uint64
		if t := s.n.cfg.TrailingLogs; s.index > t {
			to = s.index - t
		}
		s.n.snapLive.Store(int64(len(live)))
		to = s.n.holdDenseLog(live, to)
		if err := store.Retain(live, to); err != nil {
			// The pin stays where it was: the log is kept, nothing lost.
			s.n.log.Error("body store: cannot relocate the bodies of the compacted log", "err", err)
		}
	}
	return nil
}

// Release gives back the encoding's memory: raft calls it once, after
// Persist.
func (s fsmSnapshot) Release() {
	if r, ok := s.w.(fsm.Releaser); ok {
		r.Release()
	}
	s.n.returnMemory()
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
func (n *Node) returnMemory() {
	if n.snapLive.Load() < returnAfterBodies {
		return
	}
	debug.FreeOSMemory()
}

// localSink passes on only the effects addressed to this node, with the
// bodies of its deliveries read.
type localSink struct {
	node   string
	next   fsm.Sink
	bodies *batchBodies
	log    *slog.Logger
}

// WantsDeliveries implements fsm.DeliveryFilter: the state machine builds
// no delivery for another node's consumer.
func (s localSink) WantsDeliveries(c *proto.ConsumerRef) bool {
	return s.next != nil && c.GetChannel().GetNode() == s.node
}

func (s localSink) Deliver(d *fsm.Delivery) {
	if !s.WantsDeliveries(d.Consumer) {
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
	s.next.Deliver(d)
}

func (s localSink) ConsumerCancelled(c *proto.ConsumerRef) {
	if s.next != nil && c.GetChannel().GetNode() == s.node {
		s.next.ConsumerCancelled(c)
	}
}

func (s localSink) ChannelTimedOut(ch *proto.ChannelRef, timeout int64) {
	if s.next != nil && ch.GetNode() == s.node {
		s.next.ChannelTimedOut(ch, timeout)
	}
}

func (s localSink) ConsumerTimedOut(c *proto.ConsumerRef, timeout int64, tags []uint64) {
	if s.next != nil && c.GetChannel().GetNode() == s.node {
		s.next.ConsumerTimedOut(c, timeout, tags)
	}
}

func (s localSink) NodeDown(node string) {
	if s.next != nil && node == s.node {
		s.next.NodeDown(node)
	}
}

// appliedIndex tracks the highest log index the local state machine has
// applied and wakes whoever waits for it.
type appliedIndex struct {
	mu    sync.Mutex
	index uint64
	ch    chan struct{} // closed and replaced on every advance
}

func newAppliedIndex() *appliedIndex { return &appliedIndex{ch: make(chan struct{})} }

func (a *appliedIndex) advance(i uint64) {
	a.mu.Lock()
	if i > a.index {
		a.index = i
	}
	close(a.ch)
	a.ch = make(chan struct{})
	a.mu.Unlock()
}

// load returns the applied index and a channel closed at the next advance.
func (a *appliedIndex) load() (uint64, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.index, a.ch
}

// wait blocks until the applied index reaches i.
func (a *appliedIndex) wait(ctx context.Context, closing <-chan struct{}, i uint64) error {
	for {
		cur, ch := a.load()
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
