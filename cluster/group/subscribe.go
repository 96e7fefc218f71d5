package group

import (
	"context"
	"errors"
	"sync"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Effect is one effect of the group's log addressed to a channel of a
// node that does not run the group, as the adapter queues it for that
// node's subscription: one field set (Timeout and Tags go with the
// timeouts). A delivery carries its body.
type Effect struct {
	Deliver          *fsm.Delivery
	Cancelled        *proto.ConsumerRef
	ChannelTimedOut  *proto.ChannelRef
	ConsumerTimedOut *proto.ConsumerRef
	Timeout          int64
	Tags             []uint64
	NodeDown         string
	// Run is the run of a NodeDown the node released itself
	// (fsm.ReleaseSink).
	Run string
}

// size is what the effect weighs against a subscription's bound.
func (e Effect) size() int {
	if d := e.Deliver; d != nil {
		return 256 + len(d.Body)
	}
	return 128 + 8*len(e.Tags)
}

// Errors a subscription ends with; the subscriber connects again and
// catches up from the sync.
var (
	// ErrSubscriberBehind: the subscriber did not take its effects fast
	// enough, and what waited for it passed the subscription's bound.
	ErrSubscriberBehind = errors.New("cluster: the subscriber fell too far behind the group's effects")
	// ErrStateRestored: the state was replaced by a snapshot, whose
	// entries produced no effects here.
	ErrStateRestored = errors.New("cluster: the group's state was restored from a snapshot")
	// ErrSubscriptionReplaced: the node subscribed again.
	ErrSubscriptionReplaced = errors.New("cluster: the node subscribed again")
	// errUnsubscribed: the subscriber left.
	errUnsubscribed = errors.New("cluster: unsubscribed")
)

// Subscription queues the effects of the group's log addressed to one
// other node's channels, from the state its sync was taken from on. The
// adapter pushes under the state lock and never waits; the subscriber
// takes them with Next.
type Subscription struct {
	node     string
	maxBytes int
	f        *FSM

	mu    sync.Mutex
	q     []Effect
	bytes int
	err   error
	wake  chan struct{} // one token: something to take, or the end
}

// Sync is what the log held of a node's channels when its subscription
// started: every effect after Index is queued on the subscription.
// Timeouts are the consumer timeouts of its channels this node applied
// last, at or before Index, in log order: a node whose earlier stream
// broke as one fell due learns from them what became of a consumer the
// sync no longer holds.
type Sync struct {
	Index    uint64
	Channels []fsm.NodeChannel
	Timeouts []RecentTimeout
}

// RecentTimeout is a consumer timeout (Effect's ChannelTimedOut or
// ConsumerTimedOut) and the index of the entry that decided it.
type RecentTimeout struct {
	Index  uint64
	Effect Effect
}

// maxRecentTimeouts bounds the consumer timeouts a group's state machine
// keeps for other nodes' syncs. A timeout is one entry of the log per
// channel or consumer whose delivery went unacknowledged for minutes; a
// node's stream is down for seconds.
const maxRecentTimeouts = 1024

// recentTimeouts keeps the last maxRecentTimeouts timeouts, oldest first.
type recentTimeouts struct {
	ring []RecentTimeout
	next int // where the next goes once the ring is full
}

func (r *recentTimeouts) add(t RecentTimeout) {
	if len(r.ring) < maxRecentTimeouts {
		r.ring = append(r.ring, t)
		return
	}
	r.ring[r.next] = t
	r.next = (r.next + 1) % maxRecentTimeouts
}

// of is the timeouts of node's channels, oldest first.
func (r *recentTimeouts) of(node string) []RecentTimeout {
	var out []RecentTimeout
	for i := range r.ring {
		t := r.ring[(r.next+i)%len(r.ring)]
		if t.node() == node {
			out = append(out, t)
		}
	}
	return out
}

// node is the node of the timeout's channel.
func (t RecentTimeout) node() string {
	if c := t.Effect.ConsumerTimedOut; c != nil {
		return c.GetChannel().GetNode()
	}
	return t.Effect.ChannelTimedOut.GetNode()
}

// Subscribe starts queueing the effects of this group's log for node's
// channels, with at most maxBytes waiting (a delivery counts its body),
// and returns what the state holds of those channels as of now, with the
// bodies of their unsettled deliveries read. A node has one subscription
// at a time: a new one ends the old with ErrSubscriptionReplaced.
func (f *FSM) Subscribe(node string, maxBytes int) (*Subscription, Sync) {
	s := &Subscription{node: node, maxBytes: maxBytes, f: f, wake: make(chan struct{}, 1)}
	bb := &batchBodies{store: f.bodies}
	f.state.mu.Lock()
	defer f.state.mu.Unlock()
	sync := Sync{Index: f.state.m.AppliedIndex(), Channels: f.state.m.NodeChannels(node), Timeouts: f.timeouts.of(node)}
	for i := range sync.Channels {
		ds := sync.Channels[i].Deliveries[:0]
		for _, d := range sync.Channels[i].Deliveries {
			if d.Body == nil && d.BodyRef.Size > 0 {
				b, err := bb.read(d.BodyRef)
				if err != nil {
					f.log.Error("a delivery's message body cannot be read: not sent to the node catching up", "node", node, "consumer", d.Consumer.GetTag(), "err", err)
					continue
				}
				d.Body = b
			}
			ds = append(ds, d)
		}
		sync.Channels[i].Deliveries = ds
	}
	if old := f.subs[node]; old != nil {
		old.end(ErrSubscriptionReplaced)
	}
	if f.subs == nil {
		f.subs = map[string]*Subscription{}
	}
	f.subs[node] = s
	return s, sync
}

// Next returns the effects queued since the last call, waiting for one
// if there are none; it returns the reason once the subscription ended
// (after the effects queued before the end).
func (s *Subscription) Next(ctx context.Context) ([]Effect, error) {
	for {
		s.mu.Lock()
		q, err := s.q, s.err
		s.q, s.bytes = nil, 0
		s.mu.Unlock()
		if len(q) > 0 {
			return q, nil
		}
		if err != nil {
			return nil, err
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close ends the subscription: no more effects are queued for its node.
func (s *Subscription) Close() {
	s.f.state.mu.Lock()
	defer s.f.state.mu.Unlock()
	if s.f.subs[s.node] == s {
		delete(s.f.subs, s.node)
	}
	s.end(errUnsubscribed)
}

// push queues e. Locks: the state lock held (the subscription is in
// f.subs).
func (s *Subscription) push(e Effect) {
	s.mu.Lock()
	if s.err == nil {
		s.q = append(s.q, e)
		s.bytes += e.size()
		if s.bytes > s.maxBytes {
			s.err = ErrSubscriberBehind
			// Dropped: the subscriber learns the state again from its
			// next sync, where they are.
			s.q, s.bytes = nil, 0
		}
	}
	s.mu.Unlock()
	s.signal()
}

// end ends the subscription with err (the first reason stays).
func (s *Subscription) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// endSubscriptions ends every subscription with err. Locks: the state
// lock held.
func (f *FSM) endSubscriptions(err error) {
	for node, s := range f.subs {
		s.end(err)
		delete(f.subs, node)
	}
}

// subscriber is node's subscription, nil when it has none, and drops
// one that ended. Locks: the state lock held.
func (f *FSM) subscriber(node string) *Subscription {
	s := f.subs[node]
	if s == nil {
		return nil
	}
	s.mu.Lock()
	ended := s.err != nil
	s.mu.Unlock()
	if ended {
		delete(f.subs, node)
		return nil
	}
	return s
}
