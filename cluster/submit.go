package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

// pending is one request waiting for its results: commands a local caller
// submitted, or one forwarded request. Its commands always travel in one
// log entry.
type pending struct {
	cmds []*proto.Command
	size int
	// Set on the leader by admit: the commands that go into the entry,
	// and the refusal of each command that does not (nil when all do).
	valid   []*proto.Command
	refused []*proto.Result
	once    sync.Once
	done    chan struct{}
	cb      func(res []*proto.Result, index uint64, err error)

	res   []*proto.Result
	index uint64
	err   error
}

func newPending(cmds []*proto.Command) *pending {
	size := 0
	for _, c := range cmds {
		size += gproto.Size(c)
	}
	return &pending{cmds: cmds, size: size, done: make(chan struct{})}
}

// finish records the outcome once; later calls are ignored.
func (p *pending) finish(res []*proto.Result, index uint64, err error) {
	p.once.Do(func() {
		p.res, p.index, p.err = res, index, err
		if p.cb != nil {
			p.cb(res, index, err)
		}
		if p.done != nil {
			close(p.done)
		}
	})
}

// admit validates p's commands on the leader before they enter an entry:
// the valid ones are proposed, each invalid one is refused alone with its
// own result, so a bad command fails its caller and no other. have is the
// lowest protocol of the cluster, looked up once per entry when a command
// needs more than the first protocol (0 until then).
func (n *Node) admit(p *pending, have *uint32) {
	for i, c := range p.cmds {
		err := fsm.Validate(c, fsm.Limits{MaxBody: n.cfg.MaxMessageSize})
		if err == nil {
			if need := (*commandProtocol.Load())(c); need > 1 {
				if *have == 0 {
					*have = n.clusterProtocol()
				}
				if need > *have {
					err = fsm.Unsupported(c, need, *have)
				}
			}
		}
		if err == nil {
			continue
		}
		if p.refused == nil {
			p.refused = make([]*proto.Result, len(p.cmds))
		}
		var ie *fsm.InvalidError
		if !errors.As(err, &ie) {
			ie = &fsm.InvalidError{Code: replycode.InternalError, Text: "INTERNAL_ERROR - " + err.Error()}
		}
		p.refused[i] = ie.Result()
		n.log.Warn("refused a command before proposing it", "text", ie.Text)
	}
	if p.refused == nil {
		p.valid = p.cmds
		return
	}
	p.valid = make([]*proto.Command, 0, len(p.cmds))
	for i, c := range p.cmds {
		if p.refused[i] == nil {
			p.valid = append(p.valid, c)
		}
	}
}

// results merges the state machine's results of p's valid commands with
// the refusals of the others, in p's order.
func (p *pending) results(applied []*proto.Result, index uint64) []*proto.Result {
	if p.refused == nil {
		return applied
	}
	out := make([]*proto.Result, len(p.cmds))
	k := 0
	for i, r := range p.refused {
		if r != nil {
			r.Index = index
			out[i] = r
			continue
		}
		out[i] = applied[k]
		k++
	}
	return out
}

// commandProtocol holds fsm.CommandProtocol; tests give a kind a higher
// protocol.
var commandProtocol atomic.Pointer[func(*proto.Command) uint32]

func init() {
	f := fsm.CommandProtocol
	commandProtocol.Store(&f)
}

// clusterProtocol is the lowest command protocol announced by the servers
// of the latest raft configuration.
func (n *Node) clusterProtocol() uint32 {
	f := n.group.Raft().GetConfiguration()
	if f.Error() != nil {
		return 1
	}
	return lowestProtocol(f.Configuration().Servers, n.cfg.NodeID, n.protocol.Load(), n.members)
}

// lowestProtocol is the lowest protocol of servers: this node's own, and
// what the others gossip. A server not seen through gossip, or one that
// announces none (a version older than the announcement), counts as the
// first protocol, so a kind that needs more waits until every server has
// said it supports it.
func lowestProtocol(servers []raft.Server, self string, own uint32, members *memberTable) uint32 {
	low := own
	for _, s := range servers {
		v := uint32(1)
		if string(s.ID) == self {
			v = own
		} else if m, ok := members.get(string(s.ID)); ok && m.meta.GetProtocol() > 0 {
			v = m.meta.GetProtocol()
		}
		low = min(low, v)
	}
	return low
}

type inflightEntry struct {
	f     raft.ApplyFuture
	batch []*pending
	data  []byte // the entry as proposed
}

// Submit proposes one command and returns its result once the command has
// committed AND this node's state machine has applied it (so the effects for
// local consumers have been emitted and the caller reads its own write).
// On a follower the command is forwarded to the leader. Commands that never
// reached a leader are sent again while a leader is awaited; an error never
// hides a commit, and ErrOutcomeUnknown means the outcome is unknown.
func (n *Node) Submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error) {
	res, err := n.SubmitBatch(ctx, []*proto.Command{cmd})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// SubmitBatch is Submit for several commands: they go into ONE log entry,
// in order, and the results come back in the same order.
func (n *Node) SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	n.gateFailed(cmds)
	deadline, hasDeadline := ctx.Deadline()
	if !hasDeadline {
		deadline = time.Now().Add(n.cfg.LeaderWait)
	}
	for {
		if n.isClosed() {
			return nil, ErrClosed
		}
		res, index, err := n.route(ctx, deadline, cmds)
		if err == nil {
			if len(res) != len(cmds) {
				return nil, fmt.Errorf("cluster: %d results for %d commands", len(res), len(cmds))
			}
			if err := n.applied.Wait(ctx, n.closing, index); err != nil {
				return nil, fmt.Errorf("cluster: committed at %d, not yet applied here: %w", index, err)
			}
			return res, nil
		}
		if !isRetryable(err) || ctx.Err() != nil || !time.Now().Before(deadline) {
			return nil, err
		}
		// Nothing reached the log: wait for a leader change and try again.
		wait := n.changed.wait()
		t := time.NewTimer(min(50*time.Millisecond, time.Until(deadline)))
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
		case <-n.closing:
		}
		t.Stop()
	}
}

// route sends the commands once: into the local group commit on a ready
// leader, over the forwarding stream otherwise.
func (n *Node) route(ctx context.Context, deadline time.Time, cmds []*proto.Command) ([]*proto.Result, uint64, error) {
	target, err := n.waitLeader(ctx, deadline)
	if err != nil {
		return nil, 0, err
	}
	p := newPending(cmds)
	if target.self {
		n.enqueue(p)
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-n.closing:
			p.finish(nil, 0, fmt.Errorf("%w: %w", ErrClosed, ErrOutcomeUnknown))
		}
		return p.res, p.index, p.err
	}
	return n.fwd.submit(ctx, target, p)
}

type leaderTarget struct {
	self     bool
	id, addr string // the leader's id and gRPC address
}

// waitLeader returns where commands go now, waiting for a leader (and its
// gRPC address) until the deadline.
func (n *Node) waitLeader(ctx context.Context, deadline time.Time) (leaderTarget, error) {
	for {
		wait := n.changed.wait()
		if n.lead.Load() != nil {
			return leaderTarget{self: true}, nil
		}
		if n.group.Raft().State() != raft.Leader {
			_, id := n.group.Raft().LeaderWithID()
			if id != "" && string(id) != n.cfg.NodeID {
				if m, ok := n.members.get(string(id)); ok && m.meta.GetGrpcAddr() != "" {
					return leaderTarget{id: string(id), addr: m.meta.GetGrpcAddr()}, nil
				}
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return leaderTarget{}, ErrNoLeader
		}
		t := time.NewTimer(min(left, 100*time.Millisecond))
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return leaderTarget{}, ctx.Err()
		case <-n.closing:
			t.Stop()
			return leaderTarget{}, ErrClosed
		}
		t.Stop()
	}
}

// enqueue hands p to the leader's group commit.
func (n *Node) enqueue(p *pending) {
	if n.lead.Load() == nil {
		p.finish(nil, 0, notAppended(ErrNotLeader))
		return
	}
	select {
	case n.applyQ <- p:
	case <-n.closing:
		p.finish(nil, 0, notAppended(ErrClosed))
	}
}

func (n *Node) isClosed() bool {
	select {
	case <-n.closing:
		return true
	default:
		return false
	}
}

// runBatcher is the group commit: it drains the queue of pending requests
// into one Envelope (bounded in commands and bytes), stamps it and hands it
// to raft without waiting for earlier entries to commit.
func (n *Node) runBatcher() {
	defer n.wg.Done()
	defer close(n.completeQ)
	for {
		var first *pending
		select {
		case first = <-n.applyQ:
		case <-n.closing:
			n.drainApplyQ()
			return
		}
		batch := []*pending{first}
		count, size := len(first.cmds), first.size
	fill:
		for count < n.cfg.MaxBatchCommands && size < n.cfg.MaxBatchBytes {
			select {
			case p := <-n.applyQ:
				if count+len(p.cmds) > n.cfg.MaxBatchCommands || size+p.size > n.cfg.MaxBatchBytes {
					n.proposeBatch(batch, count)
					batch, count, size = nil, 0, 0
				}
				batch = append(batch, p)
				count += len(p.cmds)
				size += p.size
			default:
				break fill
			}
		}
		n.proposeBatch(batch, count)
	}
}

func (n *Node) drainApplyQ() {
	for {
		select {
		case p := <-n.applyQ:
			p.finish(nil, 0, notAppended(ErrClosed))
		default:
			return
		}
	}
}

func (n *Node) proposeBatch(batch []*pending, count int) {
	if len(batch) == 0 {
		return
	}
	select {
	case n.sem <- struct{}{}:
	case <-n.closing:
		for _, p := range batch {
			p.finish(nil, 0, notAppended(ErrClosed))
		}
		return
	}
	if n.lead.Load() == nil {
		<-n.sem
		for _, p := range batch {
			p.finish(nil, 0, notAppended(ErrNotLeader))
		}
		return
	}
	// Commands enter an entry here and nowhere else: validate them here.
	var have uint32
	cmds := make([]*proto.Command, 0, count)
	kept := batch[:0]
	for _, p := range batch {
		n.admit(p, &have)
		if len(p.valid) == 0 {
			// Nothing of it goes into the log: it is answered now.
			p.finish(p.results(nil, 0), 0, nil)
			continue
		}
		kept = append(kept, p)
		cmds = append(cmds, p.valid...)
	}
	batch = kept
	if len(batch) == 0 {
		<-n.sem
		return
	}
	env := &proto.Envelope{Version: group.EnvelopeVersion, StampMs: n.stamp.next(), Commands: cmds}
	data, err := gproto.Marshal(env)
	if err != nil {
		<-n.sem
		for _, p := range batch {
			p.finish(nil, 0, notAppended(fmt.Errorf("cluster: encode entry: %w", err)))
		}
		return
	}
	n.proposals.Put(data, env)
	f := n.group.Raft().Apply(data, 0)
	n.completeQ <- inflightEntry{f: f, batch: batch, data: data}
}

// runCompleter waits for each proposed entry in log order and hands every
// request its results.
func (n *Node) runCompleter() {
	defer n.wg.Done()
	for it := range n.completeQ {
		err := n.await(context.Background(), it.f)
		<-n.sem
		if err != nil {
			// Not applied here, or not yet: it is decoded if it ever is.
			n.proposals.Drop(it.data)
			err = mapRaftError(err)
			for _, p := range it.batch {
				p.finish(nil, 0, err)
			}
			continue
		}
		idx := it.f.Index()
		results, ok := it.f.Response().([]*proto.Result)
		want := 0
		for _, p := range it.batch {
			want += len(p.valid)
		}
		if !ok || len(results) != want {
			err := fmt.Errorf("cluster: entry %d: state machine returned %d results for %d commands", idx, len(results), want)
			for _, p := range it.batch {
				p.finish(nil, idx, err)
			}
			continue
		}
		off := 0
		for _, p := range it.batch {
			end := off + len(p.valid)
			p.finish(p.results(results[off:end:end], idx), idx, nil)
			off = end
		}
	}
}

// mapRaftError turns raft's errors into this package's: failures where
// nothing was appended become retryable, lost leadership after the append
// becomes ErrOutcomeUnknown.
func mapRaftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return notAppendedf(ErrNotLeader, "%v", err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrClosed, ErrOutcomeUnknown)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return notAppendedf(ErrNoLeader, "%v", err)
	}
	return err
}

// gateFailed clears Requeue.failed (basic.reject) while the log this node
// applied is below protocol level 8: below it a reject means what a nack
// does, and a server of an earlier release would refuse the field.
func (n *Node) gateFailed(cmds []*proto.Command) {
	var level uint32
	for _, c := range cmds {
		if r := c.GetRequeue(); r.GetFailed() {
			if level == 0 {
				n.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
			}
			if level < fsm.RetryLevel {
				r.Failed = false
			}
		}
	}
}
