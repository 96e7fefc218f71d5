package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

// A node that does not run a queue group still serves its queues: its
// commands go to the group's leader (SubmitGroup), and the effects of the
// group's log for its channels come from a member as a stream
// (Internal.Effects). The member queues them as it applies its entries
// (group.Subscribe) and never waits for the stream. A stream that breaks
// (the member died, fell out of the group, restored a snapshot, or the
// node fell too far behind) is opened again, to the next member (to the
// same one when it ended for the node's own silence), and starts with
// what the log holds of the node's channels: the deliveries the node may
// have missed are among their unsettled ones. A log numbers each
// channel's deliveries in order, so the node skips those at or below the
// last tag it handed its channel.

// maxEffectsBacklog bounds the effects a member queues for one node that
// does not take them: past it, the stream ends and the node catches up
// from its next sync.
const maxEffectsBacklog = 64 << 20

// maxEffectsMessage bounds the effects one stream message carries, below
// the internal service's message limit.
const maxEffectsMessage = 4 << 20

// Effects implements proto.InternalServer on a member of the group.
func (fs *forwardServer) Effects(req *proto.EffectsRequest, stream grpc.ServerStreamingServer[proto.EffectsMessage]) error {
	n := fs.n
	if req.GetNode() == "" || req.GetNode() == n.cfg.NodeID {
		return status.Errorf(codes.InvalidArgument, "effects for node %q: not another node", req.GetNode())
	}
	qg := n.queueGroup(req.GetGroup())
	if qg == nil {
		return status.Errorf(codes.Unavailable, "%s does not run queue group %q", n.cfg.NodeID, req.GetGroup())
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-qg.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	if req.GetFence() {
		tctx, cancel := context.WithTimeout(ctx, groupGetsWait)
		err := qg.tick(tctx)
		cancel()
		if err != nil {
			return err
		}
	}
	sub, sync := qg.g.FSM().Subscribe(req.GetNode(), maxEffectsBacklog)
	defer sub.Close()
	keep := effectsKeepalive(req.GetKeepaliveMs())
	first := &proto.EffectsMessage{Sync: &proto.EffectsSync{Index: sync.Index, KeepaliveMs: uint32(keep.Milliseconds())}}
	for _, ch := range sync.Channels {
		sc := &proto.SyncChannel{Channel: ch.Ref, Consumers: ch.Consumers}
		for _, d := range ch.Deliveries {
			sc.Deliveries = append(sc.Deliveries, remoteDelivery(d))
		}
		first.Sync.Channels = append(first.Sync.Channels, sc)
	}
	for _, t := range sync.Timeouts {
		first.Sync.Timeouts = append(first.Sync.Timeouts, &proto.SyncTimeout{Index: t.Index, Effect: effectProto(t.Effect)})
	}
	if err := stream.Send(first); err != nil {
		return err
	}
	for {
		es, err := nextEffects(ctx, sub, keep)
		if err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return status.Error(codes.Aborted, err.Error())
		}
		if len(es) == 0 {
			// Quiet for keep: the node hears the member still sends,
			// unless the member lost touch with its group (cut off
			// from the others' raft while the node still reaches it):
			// then its log is quiet because it learns nothing, and
			// the node had better take the effects from another.
			if !inTouch(qg.g.Raft().State(), qg.g.Raft().LastContact(), time.Now(), n.cfg.HeartbeatTimeout) {
				continue
			}
			if err := stream.Send(&proto.EffectsMessage{}); err != nil {
				return err
			}
			continue
		}
		msg, size := &proto.EffectsMessage{}, 0
		for _, e := range es {
			pe := effectProto(e)
			msg.Effects = append(msg.Effects, pe)
			if d := pe.GetDeliver(); d != nil {
				size += len(d.GetBody())
			}
			if size >= maxEffectsMessage {
				if err := stream.Send(msg); err != nil {
					return err
				}
				msg, size = &proto.EffectsMessage{}, 0
			}
		}
		if len(msg.Effects) > 0 {
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
	}
}

// inTouch reports whether a member whose raft is in state, last heard
// from its leader at last, is in touch with its group at now: it leads,
// or it follows a leader heard from within the heartbeat timeout.
func inTouch(state raft.RaftState, last, now time.Time, heartbeatTimeout time.Duration) bool {
	switch state {
	case raft.Leader:
		return true
	case raft.Follower:
		return !last.IsZero() && now.Sub(last) <= heartbeatTimeout
	}
	return false
}

// Bounds on the keepalive a node may ask of an effects stream: a
// smaller ask gets the least, a larger one the most.
const (
	minEffectsKeepalive = 20 * time.Millisecond
	maxEffectsKeepalive = 10 * time.Second
)

// effectsKeepalive is the keepalive a member promises for a request's
// ms (0: none asked, none promised), within the bounds.
func effectsKeepalive(ms uint32) time.Duration {
	if ms == 0 {
		return 0
	}
	return min(max(time.Duration(ms)*time.Millisecond, minEffectsKeepalive), maxEffectsKeepalive)
}

// nextEffects is sub.Next, or no effects and no error once keep (when
// set) passed without any.
func nextEffects(ctx context.Context, sub *group.Subscription, keep time.Duration) ([]group.Effect, error) {
	if keep <= 0 {
		return sub.Next(ctx)
	}
	wctx, cancel := context.WithTimeout(ctx, keep)
	defer cancel()
	es, err := sub.Next(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, nil
	}
	return es, err
}

func remoteDelivery(d *fsm.Delivery) *proto.RemoteDelivery {
	return &proto.RemoteDelivery{Consumer: d.Consumer, Group: d.Group, DeliveryTag: d.DeliveryTag, Redelivered: d.Redelivered,
		Exchange: d.Exchange, RoutingKey: d.RoutingKey, Properties: d.Properties, Body: d.Body, Deadline: d.Deadline, NoAck: d.NoAck}
}

func fsmDelivery(d *proto.RemoteDelivery) *fsm.Delivery {
	body := d.GetBody()
	if body == nil {
		body = []byte{}
	}
	return &fsm.Delivery{Consumer: d.GetConsumer(), Group: d.GetGroup(), DeliveryTag: d.GetDeliveryTag(), Redelivered: d.GetRedelivered(),
		Exchange: d.GetExchange(), RoutingKey: d.GetRoutingKey(), Properties: d.GetProperties(), Body: body,
		BodyRef: queue.Body{Size: uint32(len(body))}, Deadline: d.GetDeadline(), NoAck: d.GetNoAck()}
}

func effectProto(e group.Effect) *proto.Effect {
	switch {
	case e.Deliver != nil:
		return &proto.Effect{Kind: &proto.Effect_Deliver{Deliver: remoteDelivery(e.Deliver)}}
	case e.Cancelled != nil:
		return &proto.Effect{Kind: &proto.Effect_Cancelled{Cancelled: e.Cancelled}}
	case e.ChannelTimedOut != nil:
		return &proto.Effect{Kind: &proto.Effect_ChannelTimedOut{ChannelTimedOut: &proto.ChannelTimeoutEffect{Channel: e.ChannelTimedOut, Timeout: e.Timeout}}}
	case e.ConsumerTimedOut != nil:
		return &proto.Effect{Kind: &proto.Effect_ConsumerTimedOut{ConsumerTimedOut: &proto.ConsumerTimeoutEffect{Consumer: e.ConsumerTimedOut, Timeout: e.Timeout, Tags: e.Tags}}}
	default:
		return &proto.Effect{Kind: &proto.Effect_NodeDown{NodeDown: e.NodeDown}, NodeDownRun: e.Run}
	}
}

// remoteEffects are the node's followers of the effects of the queue
// groups it does not run, by group id.
type remoteEffects struct {
	rmu     sync.Mutex
	remotes map[string]*effectsFollower
	// named is set once the metadata log names queue groups.
	named atomic.Bool
}

// HasQueueGroups reports whether the metadata log this node applied names
// queue groups, whether or not it runs any: without a lock, for the
// publish path.
func (n *Node) HasQueueGroups() bool { return n.named.Load() }

// effectsFollower keeps one stream of a group's effects for this node
// open, to one member after another.
type effectsFollower struct {
	id   string
	run  string // the node's (its own release closes nothing)
	stop chan struct{}
	done chan struct{}

	mu sync.Mutex
	// last is the tag of the last delivery handed to each channel
	// (refKey), which a sync's deliveries are checked against.
	last map[string]uint64
	// consumers are this node's consumers in the group, each with the
	// index its consume committed at: one a sync at or past that index
	// no longer holds was cancelled while the stream was down (its
	// queue deleted, its delivery timed out), and its client is told.
	consumers map[string]consumerAt

	// syncedIn is the node's silence epoch when the last stream opened
	// (follow's goroutine only): a stream opened in a later one asks the
	// member to catch up with the log before its sync (fence).
	syncedIn uint64
	// opened counts the streams opened, source the member of the last
	// (under mu).
	opened int
	source string
}

// consumerAt is a consumer of this node in a followed group.
type consumerAt struct {
	ref   *proto.ConsumerRef
	index uint64
}

// consumerKey is a consumer's key: its channel's and its tag.
func consumerKey(c *proto.ConsumerRef) string { return refKey(c.GetChannel()) + "\x00" + c.GetTag() }

// followRemoteGroups starts following the groups of specs this node is
// not a member of, and stops following those it runs now or the log no
// longer names.
func (n *Node) followRemoteGroups(specs []fsm.QueueGroup) {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	want := map[string]bool{}
	for _, s := range specs {
		if !s.HasMember(n.cfg.NodeID) && len(s.Members) > 0 {
			want[s.ID] = true
		}
	}
	for id, f := range n.remotes {
		if !want[id] {
			close(f.stop)
			delete(n.remotes, id)
		}
	}
	for id := range want {
		if n.remotes[id] != nil {
			continue
		}
		if n.remotes == nil {
			n.remotes = map[string]*effectsFollower{}
		}
		f := &effectsFollower{id: id, run: n.run, stop: make(chan struct{}), done: make(chan struct{}), last: map[string]uint64{},
			consumers: map[string]consumerAt{}}
		n.remotes[id] = f
		n.wg.Add(1)
		go n.follow(f)
	}
}

// follow keeps a stream of f's group's effects open until the node
// closes or stops following the group.
func (n *Node) follow(f *effectsFollower) {
	defer n.wg.Done()
	defer close(f.done)
	ctx, cancel := n.untilClosed(context.Background())
	defer cancel()
	go func() {
		select {
		case <-f.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := n.log.With("group", f.id)
	wait := 50 * time.Millisecond
	for attempt := 0; ctx.Err() == nil; attempt++ {
		member, addr := n.effectsSource(f.id, attempt)
		if addr == "" {
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		f.mu.Lock()
		f.opened++
		f.source = member
		f.mu.Unlock()
		synced, err := n.followFrom(ctx, f, member, addr)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNodeSilent) {
			// The member answered after this node's silence: it is
			// live, and the next stream, fenced, goes to it again at
			// once. Another member may be the one whose silence this
			// was (a frozen metadata leader silences every node), and
			// a stream to it would wait until the cluster finds it out.
			log.Info("the stream of a queue group's effects ended: from the same member", "member", member, "err", err)
			attempt--
			wait = 50 * time.Millisecond
			continue
		}
		if synced {
			wait = 50 * time.Millisecond
		}
		log.Info("the stream of a queue group's effects ended: to the next member", "member", member, "err", err)
		if !sleepCtx(ctx, wait) {
			return
		}
		wait = min(2*wait, time.Second)
	}
}

// effectsSource is the member of group id to take its effects from on
// this attempt, in turn, skipping those gossip or the metadata leader
// find silent, and its gRPC address ("" when none is known).
func (n *Node) effectsSource(id string, attempt int) (member, addr string) {
	var members []string
	n.View(func(m *fsm.Machine) {
		for _, s := range m.QueueGroups() {
			if s.ID == id {
				for _, gm := range s.Members {
					members = append(members, gm.ID)
				}
			}
		}
	})
	if len(members) == 0 {
		return "", ""
	}
	// From this attempt's member on, the first that answers; any, if
	// none seems to.
	suspect := n.suspects()
	for i := range members {
		id := members[(attempt+i)%len(members)]
		if addr, ok := n.answering(id, suspect); ok {
			return id, addr
		}
	}
	member = members[attempt%len(members)]
	if m, ok := n.members.Get(member); ok {
		addr = m.Meta.GetGrpcAddr()
	}
	return member, addr
}

// errNodeSilent ends a stream that delivered after this node's own
// silence (SilenceEpoch changed since it opened): what the member sent
// since must be fenced again, and the member itself is live.
var errNodeSilent = errors.New("this node was silent since the stream opened")

// followFrom takes the effects of f's group from member until the stream
// ends, and reports whether it got as far as the sync.
func (n *Node) followFrom(ctx context.Context, f *effectsFollower, member, addr string) (synced bool, _ error) {
	conn, err := n.dialInternal(member, addr)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A member that froze or was cut off sends nothing and closes
	// nothing: the stream goes to the next member once the member has
	// left a wait for its next message unanswered for longer than it
	// promised keepalives (silence.limit), or once gossip or the
	// metadata leader's raft finds it silent. The two watches run apart:
	// finding the suspects asks raft, which may keep the caller waiting.
	//
	// Until its sync the member has promised nothing, and a member that
	// froze takes the request and never answers: the wait for the sync,
	// from before the stream opens (the connection is made then), is
	// bounded by the keepalive this node asks for, and by the Tick a
	// fence waits for on top.
	ask := effectsKeepalive(uint32((n.cfg.HeartbeatTimeout / 5).Milliseconds()))
	opened := n.SilenceEpoch()
	fence := opened != f.syncedIn
	silence := newStreamSilence()
	silence.limit.Store(int64(effectsSyncLimit(n.cfg.HeartbeatTimeout, ask, fence)))
	silence.waiting(time.Now())
	go func() {
		t := time.NewTicker(effectsWatchEvery(n.cfg.HeartbeatTimeout))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				if d, ok := silence.over(now); ok {
					cancel(fmt.Errorf("member %s sent nothing for %v", member, d.Round(time.Millisecond)))
					// The stream's end must not wait on a
					// connection that takes nothing.
					_ = conn.Close()
					return
				}
			}
		}
	}()
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, ok := n.answering(member, n.suspects()); !ok {
					cancel(fmt.Errorf("member %s is not reached", member))
					_ = conn.Close()
					return
				}
			}
		}
	}()
	// Every delivery of this stream goes on as decided in the epoch it
	// opened in, and the stream ends at the node's next silence: what
	// the member sent meanwhile is checked in the log before it is
	// written, and the next stream starts from a sync the member takes
	// once it caught up with the log.
	stream, err := proto.NewInternalClient(conn).Effects(ctx, &proto.EffectsRequest{Group: f.id, Node: n.cfg.NodeID,
		KeepaliveMs: uint32(ask.Milliseconds()), Fence: fence})
	if err != nil {
		return false, withCause(ctx, err)
	}
	recv := func() (*proto.EffectsMessage, error) {
		silence.goesOn(time.Now())
		msg, err := stream.Recv()
		silence.waiting(time.Time{})
		return msg, withCause(ctx, err)
	}
	first, err := recv()
	if err != nil {
		return false, err
	}
	if first.GetSync() == nil {
		return false, fmt.Errorf("member %s: the stream did not start with a sync", member)
	}
	if ka := first.GetSync().GetKeepaliveMs(); ka > 0 {
		silence.limit.Store(int64(effectsSilenceLimit(n.cfg.HeartbeatTimeout, time.Duration(ka)*time.Millisecond)))
	} else {
		// A member that promised none may be quiet for as long as its
		// log is.
		silence.limit.Store(0)
	}
	f.syncedIn = opened
	sink := n.streamSink(opened)
	f.sync(sink, first.GetSync())
	for {
		msg, err := recv()
		if errors.Is(err, io.EOF) {
			return true, fmt.Errorf("member %s ended the stream", member)
		}
		if err != nil {
			return true, err
		}
		f.hand(sink, msg.GetEffects())
		if n.SilenceEpoch() != opened {
			return true, errNodeSilent
		}
	}
}

// withCause adds to err why ctx was cancelled, when it was for a reason
// of its own (a silent member, one no longer reached).
func withCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, ctx.Err()) {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// effectsSyncLimit is how long a node waits for the sync of a stream it
// opens with keepalives asked every ask: as long as for any message,
// and with a fence the Tick the member waits for before it syncs.
func effectsSyncLimit(heartbeatTimeout, ask time.Duration, fence bool) time.Duration {
	limit := effectsSilenceLimit(heartbeatTimeout, ask)
	if fence {
		limit += groupGetsWait
	}
	return limit
}

// effectsWatchEvery is how often a node looks at a stream's silence.
func effectsWatchEvery(heartbeatTimeout time.Duration) time.Duration {
	return max(heartbeatTimeout/10, 10*time.Millisecond)
}

// effectsSilenceLimit is how long a node waits for the next message of
// a stream whose member promised keepalives every keep: raft's own
// heartbeat timeout, the silence after which a follower stands for
// leader, and never less than a few keepalives.
func effectsSilenceLimit(heartbeatTimeout, keep time.Duration) time.Duration {
	return max(heartbeatTimeout, 4*keep)
}

// streamSilence is how long a stream's reader has waited for its next
// message: only a wait counts, not the time the reader spends handing on
// what it got. Times are on the monotonic clock, from base.
type streamSilence struct {
	base  time.Time
	since atomic.Int64 // 1 + nanoseconds from base to the wait's start; 0: not waiting
	limit atomic.Int64 // the longest wait allowed; 0: any
}

func newStreamSilence() *streamSilence { return &streamSilence{base: time.Now()} }

// waiting records that a wait began at t (zero: it ended).
func (s *streamSilence) waiting(t time.Time) {
	if t.IsZero() {
		s.since.Store(0)
		return
	}
	s.since.Store(1 + int64(t.Sub(s.base)))
}

// goesOn records that a wait began at t, unless one is already under
// way: the wait for a stream's sync began before the stream opened.
func (s *streamSilence) goesOn(t time.Time) {
	s.since.CompareAndSwap(0, 1+int64(t.Sub(s.base)))
}

// over reports how long the current wait has lasted at now, and whether
// that is over the limit.
func (s *streamSilence) over(now time.Time) (time.Duration, bool) {
	limit, since := time.Duration(s.limit.Load()), s.since.Load()
	if limit <= 0 || since == 0 {
		return 0, false
	}
	d := now.Sub(s.base) - time.Duration(since-1)
	return d, d > limit
}

// sync hands on the deliveries of a sync the node has not handed its
// channels yet, and forgets the channels the log no longer holds.
func (f *effectsFollower) sync(sink fsm.Sink, s *proto.EffectsSync) {
	f.mu.Lock()
	defer f.mu.Unlock()
	held, consuming := map[string]bool{}, map[string]bool{}
	for _, ch := range s.GetChannels() {
		k := refKey(ch.GetChannel())
		held[k] = true
		for _, c := range ch.GetConsumers() {
			consuming[consumerKey(c)] = true
		}
		for _, d := range ch.GetDeliveries() {
			if d.GetDeliveryTag() <= f.last[k] {
				continue
			}
			f.last[k] = d.GetDeliveryTag()
			if sink != nil {
				sink.Deliver(fsmDelivery(d))
			}
		}
	}
	f.timedOut(sink, s, held, consuming)
	// A channel the log no longer holds was closed: a channel opened
	// again under its key is numbered from 1. Unless a consumer of it
	// committed after the sync's index: then the member is behind, the
	// channel not there yet, and what an earlier stream handed it is
	// still to be told apart from what this member sends next.
	newer := map[string]bool{}
	for _, c := range f.consumers {
		if c.index > s.GetIndex() {
			newer[refKey(c.ref.GetChannel())] = true
		}
	}
	for k := range f.last {
		if !held[k] && !newer[k] {
			delete(f.last, k)
		}
	}
	for k, c := range f.consumers {
		if !consuming[k] && c.index <= s.GetIndex() {
			delete(f.consumers, k)
			if sink != nil {
				sink.ConsumerCancelled(c.ref)
			}
		}
	}
}

// timedOut tells the node's channels the consumer timeouts of a sync
// that a broken stream did not bring: a consumer of this node that the
// sync no longer holds, and that committed before the entry that timed
// it (or its channel) out, went by that timeout, and its client is told
// as the stream would have told it (the channel closed with 406, or the
// timeout's basic.cancel), not as of a consumer whose queue went. A
// timeout the node was told already found its consumers gone here; one
// of a channel since opened again under its key finds only consumers
// that committed after it. Under f.mu.
func (f *effectsFollower) timedOut(sink fsm.Sink, s *proto.EffectsSync, held, consuming map[string]bool) {
	for _, t := range s.GetTimeouts() {
		if t.GetIndex() > s.GetIndex() {
			continue // not the sync's own: the stream brings it
		}
		switch k := t.GetEffect().GetKind().(type) {
		case *proto.Effect_ConsumerTimedOut:
			c := k.ConsumerTimedOut
			key := consumerKey(c.GetConsumer())
			if at, ok := f.consumers[key]; !ok || consuming[key] || at.index >= t.GetIndex() {
				continue
			}
			delete(f.consumers, key)
			if sink != nil {
				sink.ConsumerTimedOut(c.GetConsumer(), c.GetTimeout(), c.GetTags())
			}
		case *proto.Effect_ChannelTimedOut:
			ch := k.ChannelTimedOut
			prefix := refKey(ch.GetChannel()) + "\x00"
			if held[refKey(ch.GetChannel())] || !f.consumedBefore(prefix, t.GetIndex()) {
				continue
			}
			f.dropChannel(prefix)
			if sink != nil {
				sink.ChannelTimedOut(ch.GetChannel(), ch.GetTimeout())
			}
		}
	}
}

// consumedBefore reports whether a consumer whose key starts with prefix
// (a channel's) committed before index. Under f.mu.
func (f *effectsFollower) consumedBefore(prefix string, index uint64) bool {
	for k, c := range f.consumers {
		if strings.HasPrefix(k, prefix) && c.index < index {
			return true
		}
	}
	return false
}

// hand hands on a run of effects from the stream, in order.
func (f *effectsFollower) hand(sink fsm.Sink, es []*proto.Effect) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range es {
		switch k := e.GetKind().(type) {
		case *proto.Effect_Deliver:
			d := k.Deliver
			key := refKey(d.GetConsumer().GetChannel())
			// A log hands a channel's deliveries out once each, in
			// ascending tags: one at or below the last handed comes
			// again from a member that was behind the one an earlier
			// stream came from (it had not applied as far when it sent
			// its sync), and the client has it. A channel closed and
			// opened again is numbered from 1, but by then it is
			// forgotten: its close committed here (committed), or the
			// log no longer held it at a sync, or the node was
			// declared down.
			if d.GetDeliveryTag() <= f.last[key] {
				continue
			}
			f.last[key] = d.GetDeliveryTag()
			if sink != nil {
				sink.Deliver(fsmDelivery(d))
			}
		case *proto.Effect_Cancelled:
			delete(f.consumers, consumerKey(k.Cancelled))
			if sink != nil {
				sink.ConsumerCancelled(k.Cancelled)
			}
		case *proto.Effect_ChannelTimedOut:
			f.dropChannel(refKey(k.ChannelTimedOut.GetChannel()) + "\x00")
			if sink != nil {
				sink.ChannelTimedOut(k.ChannelTimedOut.GetChannel(), k.ChannelTimedOut.GetTimeout())
			}
		case *proto.Effect_ConsumerTimedOut:
			delete(f.consumers, consumerKey(k.ConsumerTimedOut.GetConsumer()))
			if sink != nil {
				c := k.ConsumerTimedOut
				sink.ConsumerTimedOut(c.GetConsumer(), c.GetTimeout(), c.GetTags())
			}
		case *proto.Effect_NodeDown:
			if run := e.GetNodeDownRun(); run != "" && run == f.run {
				// This run's release of its previous runs: every
				// channel of this run came into the log after it.
				continue
			}
			clear(f.last)
			clear(f.consumers)
			if sink != nil {
				sink.NodeDown(k.NodeDown)
			}
		}
	}
}

// committed tells f what this node's commands cmds, committed in its
// group with results res, did to its channels: a consume adds a consumer
// (with the index it committed at), a cancel removes it, a channel's or
// connection's close forgets the channels (the log numbers a channel
// opened again from 1) and their consumers.
func (f *effectsFollower) committed(cmds []*proto.Command, res []*proto.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range cmds {
		switch k := c.GetCmd().(type) {
		case *proto.Command_Consume:
			if i < len(res) && res[i].GetCode() == 0 {
				ref := k.Consume.GetConsumer()
				if tag := res[i].GetConsumerTag(); tag != "" && tag != ref.GetTag() {
					ref = &proto.ConsumerRef{Channel: ref.GetChannel(), Tag: tag}
				}
				f.consumers[consumerKey(ref)] = consumerAt{ref: ref, index: res[i].GetIndex()}
			}
		case *proto.Command_Cancel:
			delete(f.consumers, consumerKey(k.Cancel.GetConsumer()))
		case *proto.Command_ChannelClosed:
			delete(f.last, refKey(k.ChannelClosed.GetChannel()))
			f.dropChannel(refKey(k.ChannelClosed.GetChannel()) + "\x00")
		case *proto.Command_ConnectionClosed:
			prefix := k.ConnectionClosed.GetConnection().GetNode() + "\x00" + k.ConnectionClosed.GetConnection().GetConnection() + "\x00"
			for key := range f.last {
				if strings.HasPrefix(key, prefix) {
					delete(f.last, key)
				}
			}
			f.dropChannel(prefix)
		}
	}
}

// dropChannel forgets the consumers whose keys start with prefix (a
// channel's key and a zero byte, or a connection's prefix). Locks: f.mu
// held.
func (f *effectsFollower) dropChannel(prefix string) {
	for key := range f.consumers {
		if strings.HasPrefix(key, prefix) {
			delete(f.consumers, key)
		}
	}
}

// committedRemote tells the follower of group id, if this node follows
// it, of its commands committed there (effectsFollower.committed).
func (n *Node) committedRemote(id string, cmds []*proto.Command, res []*proto.Result) {
	n.rmu.Lock()
	f := n.remotes[id]
	n.rmu.Unlock()
	if f != nil {
		f.committed(cmds, res)
	}
}

// refKey is a channel's key: node, connection and channel number.
func refKey(r *proto.ChannelRef) string {
	return fmt.Sprintf("%s\x00%s\x00%d", r.GetNode(), r.GetConnection(), r.GetChannel())
}
