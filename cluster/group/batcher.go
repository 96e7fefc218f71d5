package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// BatcherConfig is what a group's group commit is built with.
type BatcherConfig struct {
	// MaxCommands and MaxBytes bound one entry; MaxInflight the entries
	// handed to raft and not yet applied.
	MaxCommands int
	MaxBytes    int
	MaxInflight int
	// MaxMessageSize is the largest publish body let into the log.
	MaxMessageSize int
	// Leading reports whether this node is the group's ready leader.
	Leading func() bool
	// Stamp is the next entry's log time (the leader's stamper).
	Stamp func() int64
	// CommandProtocol is the protocol a command needs
	// (fsm.CommandProtocol); ClusterProtocol the lowest every server of
	// the configuration announces.
	CommandProtocol func(*proto.Command) uint32
	ClusterProtocol func() uint32
	// Proposals keeps each proposed Envelope for the adapter.
	Proposals *Proposals
	// Refusal, when set, is a command's refusal judged on what the leader
	// has applied (Group.refusal); nil lets the command into the entry.
	Refusal func(*proto.Command) *proto.Result
	// Raft is the group's raft.
	Raft    func() *raft.Raft
	Logger  *slog.Logger
	Closing <-chan struct{}
}

// Batcher is a group's group commit on its leader: requests queued by
// Enqueue are drained into one Envelope (bounded in commands and bytes),
// validated, stamped and handed to raft without waiting for earlier
// entries; a completer hands each request its results in log order.
type Batcher struct {
	cfg       BatcherConfig
	applyQ    chan *Request
	completeQ chan inflightEntry
	sem       chan struct{}
	wg        sync.WaitGroup
	// latency is the last entry's time from being handed to raft to being
	// applied here, in nanoseconds (CommitLatency).
	latency atomic.Int64
}

// CommitLatency is how long the last entry this leader proposed took from
// being handed to raft until it was committed and applied here (0 before
// the first): RabbitMQ's commit_latency of a Ra member, measured where
// the entry is written. A follower keeps what it measured while it led.
func (b *Batcher) CommitLatency() time.Duration { return time.Duration(b.latency.Load()) }

// NewBatcher returns a batcher; Run starts it.
func NewBatcher(c BatcherConfig) *Batcher {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Batcher{cfg: c, applyQ: make(chan *Request, 4096),
		completeQ: make(chan inflightEntry, c.MaxInflight), sem: make(chan struct{}, c.MaxInflight)}
}

// Run starts the batcher and the completer; they end once Closing
// closes (Wait).
func (b *Batcher) Run() {
	b.wg.Add(2)
	go b.runBatcher()
	go b.runCompleter()
}

// Wait waits for the goroutines Run started.
func (b *Batcher) Wait() { b.wg.Wait() }

// Enqueue hands p to the leader's group commit: it finishes once its
// entry is applied, or with why it was not appended.
func (b *Batcher) Enqueue(p *Request) {
	if !b.cfg.Leading() {
		p.Finish(nil, 0, NotAppended(ErrNotLeader))
		return
	}
	select {
	case b.applyQ <- p:
	case <-b.cfg.Closing:
		p.Finish(nil, 0, NotAppended(ErrClosed))
	}
}

// admit validates p's commands on the leader before they enter an entry:
// the valid ones are proposed, each invalid one is refused alone with its
// own result, so a bad command fails its caller and no other. have is the
// lowest protocol of the cluster, looked up once per entry when a command
// needs more than the first protocol (0 until then).
func (b *Batcher) admit(p *Request, have *uint32) {
	for i, c := range p.cmds {
		err := fsm.Validate(c, fsm.Limits{MaxBody: b.cfg.MaxMessageSize})
		if err == nil {
			if need := b.cfg.CommandProtocol(c); need > 1 {
				if *have == 0 {
					*have = b.cfg.ClusterProtocol()
				}
				if need > *have {
					err = fsm.Unsupported(c, need, *have)
				}
			}
		}
		var r *proto.Result
		switch {
		case err != nil:
			var ie *fsm.InvalidError
			if !errors.As(err, &ie) {
				ie = &fsm.InvalidError{Code: replycode.InternalError, Text: "INTERNAL_ERROR - " + err.Error()}
			}
			r = ie.Result()
			b.cfg.Logger.Warn("refused a command before proposing it", "text", ie.Text)
		case b.cfg.Refusal != nil:
			r = b.cfg.Refusal(c)
		}
		if r == nil {
			continue
		}
		if p.refused == nil {
			p.refused = make([]*proto.Result, len(p.cmds))
		}
		p.refused[i] = r
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

type inflightEntry struct {
	f     raft.ApplyFuture
	batch []*Request
	data  []byte    // the entry as proposed
	start time.Time // when it was handed to raft
}

// runBatcher is the group commit: it drains the queue of pending requests
// into one Envelope (bounded in commands and bytes), stamps it and hands it
// to raft without waiting for earlier entries to commit.
func (b *Batcher) runBatcher() {
	defer b.wg.Done()
	defer close(b.completeQ)
	for {
		var first *Request
		select {
		case first = <-b.applyQ:
		case <-b.cfg.Closing:
			b.drainApplyQ()
			return
		}
		batch := []*Request{first}
		count, size := len(first.cmds), first.size
	fill:
		for count < b.cfg.MaxCommands && size < b.cfg.MaxBytes {
			select {
			case p := <-b.applyQ:
				if count+len(p.cmds) > b.cfg.MaxCommands || size+p.size > b.cfg.MaxBytes {
					b.proposeBatch(batch, count)
					batch, count, size = nil, 0, 0
				}
				batch = append(batch, p)
				count += len(p.cmds)
				size += p.size
			default:
				break fill
			}
		}
		b.proposeBatch(batch, count)
	}
}

func (b *Batcher) drainApplyQ() {
	for {
		select {
		case p := <-b.applyQ:
			p.Finish(nil, 0, NotAppended(ErrClosed))
		default:
			return
		}
	}
}

func (b *Batcher) proposeBatch(batch []*Request, count int) {
	if len(batch) == 0 {
		return
	}
	select {
	case b.sem <- struct{}{}:
	case <-b.cfg.Closing:
		for _, p := range batch {
			p.Finish(nil, 0, NotAppended(ErrClosed))
		}
		return
	}
	if !b.cfg.Leading() {
		<-b.sem
		for _, p := range batch {
			p.Finish(nil, 0, NotAppended(ErrNotLeader))
		}
		return
	}
	// Commands enter an entry here and nowhere else: validate them here.
	var have uint32
	cmds := make([]*proto.Command, 0, count)
	kept := batch[:0]
	for _, p := range batch {
		b.admit(p, &have)
		if len(p.valid) == 0 {
			// Nothing of it goes into the log: it is answered now.
			p.Finish(p.results(nil, 0), 0, nil)
			continue
		}
		kept = append(kept, p)
		cmds = append(cmds, p.valid...)
	}
	batch = kept
	if len(batch) == 0 {
		<-b.sem
		return
	}
	env := &proto.Envelope{Version: EnvelopeVersion, StampMs: b.cfg.Stamp(), Commands: cmds}
	data, err := marshalEntry(env)
	if err != nil {
		<-b.sem
		for _, p := range batch {
			p.Finish(nil, 0, NotAppended(fmt.Errorf("cluster: encode entry: %w", err)))
		}
		return
	}
	b.cfg.Proposals.Put(data, env)
	start := time.Now()
	f := b.cfg.Raft().Apply(data, 0)
	b.completeQ <- inflightEntry{f: f, batch: batch, data: data, start: start}
}

// runCompleter waits for each proposed entry in log order and hands every
// request its results.
func (b *Batcher) runCompleter() {
	defer b.wg.Done()
	for it := range b.completeQ {
		err := Await(context.Background(), b.cfg.Closing, it.f)
		<-b.sem
		if err != nil {
			// Not applied here, or not yet: it is decoded if it ever is.
			b.cfg.Proposals.Drop(it.data)
			err = MapRaftError(err)
			for _, p := range it.batch {
				p.Finish(nil, 0, err)
			}
			continue
		}
		b.latency.Store(int64(time.Since(it.start)))
		idx := it.f.Index()
		results, ok := it.f.Response().([]*proto.Result)
		want := 0
		for _, p := range it.batch {
			want += len(p.valid)
		}
		if !ok || len(results) != want {
			err := fmt.Errorf("cluster: entry %d: state machine returned %d results for %d commands", idx, len(results), want)
			for _, p := range it.batch {
				p.Finish(nil, idx, err)
			}
			continue
		}
		off := 0
		for _, p := range it.batch {
			end := off + len(p.valid)
			p.Finish(p.results(results[off:end:end], idx), idx, nil)
			off = end
		}
	}
}

// cachedSize marshals an entry with the sizes of its commands that
// NewRequest measured: measuring them again was about a third of what
// encoding an entry cost the leader. A command is not changed once
// submitted (this goroutine reads it, so a change would also be a data
// race); should one be, protobuf finds the entry's length differ from
// what the sizes add up to and refuses, and the entry is measured and
// encoded afresh.
var cachedSize = gproto.MarshalOptions{UseCachedSize: true}

// marshalEntry encodes env, whose commands went through NewRequest.
func marshalEntry(env *proto.Envelope) ([]byte, error) {
	if data, err := cachedSize.Marshal(env); err == nil {
		return data, nil
	}
	return gproto.Marshal(env)
}
