package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// The hand-off of a group's outbox (DESIGN.md, "Across groups, exactly
// once"): a message that dies in a queue group into an exchange the group
// does not hold, and in the metadata group a message routed to a queue
// placed in a queue group, waits in the group's outbox, which is state.
// The group's leader routes each on the metadata group's exchanges and
// bindings (the metadata group's entries come routed), proposes a HandOff
// keyed by (this group's number, the entry's key) to each group holding
// queues it reaches, and once every one has committed, HandOffDone up to
// the last key in this group. A target applies each key once, so a
// hand-off repeated by a new leader, a replay or a retry after an unknown
// outcome changes nothing; the source forgets a message only after its
// targets committed it.

const (
	// handOffBatch bounds the outbox entries one round hands off, and
	// handOffBytes their bodies: one entry in each target group's log.
	handOffBatch = 256
	handOffBytes = 8 << 20
	// handOffBackoff bounds the wait before a round that failed (a
	// target without a leader, a body not readable yet) is tried again:
	// a dead letter is late by at most that much past the failure's end,
	// well within the 2 s the fault suite holds deaths to.
	handOffBackoff = time.Second
)

// handOffRetryFloor is the first wait after a failed round, and the
// least time a round whose outcome was left unknown must have taken to be
// tried again at once.
const handOffRetryFloor = 100 * time.Millisecond

// retryAfter is how long a loop that proposes into another group's log
// (the hand-off, the metadata's mirror) waits after a round that took
// took failed with err, and the backoff the next failure doubles. An
// outcome left unknown by a leader that lost its place (frozen, cut off,
// deposed while it committed) is settled by sending the round again: the
// target applies each key once, and the Submitter takes the new leader.
// Such a round waited for the election that deposed the leader (the
// forwarder gives a former leader 200 ms to answer), so it goes again at
// once: a group whose leadership changed two or three times in a row
// would otherwise hold its dead letters back by the doubled waits as
// well. An unknown outcome that came faster (a stream that broke as soon
// as it was sent on) could repeat as fast, and a node that closes
// (ErrClosed) ends the loop: they back off as any other failure does,
// doubling the wait from handOffRetryFloor up to handOffBackoff, so that
// a lasting one is not tried in a loop.
func retryAfter(err error, took, backoff time.Duration) (wait, next time.Duration) {
	if took >= handOffRetryFloor && errors.Is(err, group.ErrOutcomeUnknown) && !errors.Is(err, group.ErrClosed) {
		return 0, backoff
	}
	next = min(max(2*backoff, handOffRetryFloor), handOffBackoff)
	return next, next
}

// handOffLoop hands g's outbox off, on its leader, until ctx ends: a
// round whenever the group applied more, and again after a failure.
func (n *Node) handOffLoop(ctx context.Context, g *group.Group) {
	backoff := time.Duration(0)
	for {
		_, applied := g.Applied().Load()
		start := time.Now()
		more, err := n.handOffRound(ctx, g)
		if ctx.Err() != nil {
			return
		}
		var retry <-chan time.Time
		switch {
		case err != nil:
			var wait time.Duration
			wait, backoff = retryAfter(err, time.Since(start), backoff)
			n.log.Warn("handing off a group's outbox failed", "group", g.ID(), "err", err, "retry", wait)
			retry = time.After(wait)
			applied = nil // wait out the backoff
		case more:
			backoff = 0
			continue
		default:
			backoff = 0
		}
		select {
		case <-applied:
		case <-retry:
		case <-ctx.Done():
			return
		}
	}
}

// handOffRound hands off the outbox's first entries (at most a batch):
// it reports whether more wait behind them.
func (n *Node) handOffRound(ctx context.Context, g *group.Group) (more bool, err error) {
	var entries []fsm.OutboxEntry
	var source uint32
	var waiting int
	g.State().View(func(m *fsm.Machine) {
		source, waiting = m.Group(), m.OutboxLen()
		entries = m.Outbox(0, handOffBatch)
	})
	if len(entries) == 0 {
		return false, nil
	}
	// Every entry routed on one reading of the metadata group's state.
	type route struct {
		queues   []string
		held, ok bool
	}
	routes := make([]route, len(entries))
	var level uint32 // the metadata log's protocol level
	routeAll := func() (nowhere bool) {
		n.View(func(m *fsm.Machine) {
			level = m.ProtocolLevel()
			for i, e := range entries {
				r := &routes[i]
				if len(e.Queues) > 0 {
					// Routed in the metadata log as it was published.
					r.queues, r.ok = e.Queues, true
					continue
				}
				r.queues, r.held, r.ok = m.Route(e.Vhost, e.Exchange, e.RoutingKeys, e.Properties)
				nowhere = nowhere || len(r.queues) == 0 && !r.held
			}
		})
		return nowhere
	}
	if routeAll() {
		// A message routed to no queue is dropped, as RabbitMQ drops a
		// dead letter it cannot route. This node's metadata may lag the
		// metadata log, though (an exchange or binding made a moment
		// ago on another node): a Tick through the metadata log comes
		// back once this node applied everything committed before it,
		// and the entries are routed again on that.
		if err := n.CatchUp(ctx); err != nil {
			return false, fmt.Errorf("bringing the metadata up to date before dropping an unroutable message: %w", err)
		}
		routeAll()
	}
	// The commands for each target group, in key order.
	targets := map[string][]*proto.Command{}
	var order []string
	var last uint64 // the last key routed: HandOffDone up to it
	bytes := 0
	for i, e := range entries {
		queues, held, ok := routes[i].queues, routes[i].held, routes[i].ok
		if held && level < fsm.HandOffRouteLevel {
			// A delayed exchange on the way would hold it, and the
			// metadata log cannot yet be asked to: it stays in the
			// outbox, and so does every key after it until a later
			// round (HandOffDone acknowledges a prefix).
			if last == 0 {
				return false, fmt.Errorf("outbox key %d: dead-lettered through a delayed exchange of vhost %q, which the metadata log at level %d cannot hold for a hand-off", e.Key, e.Vhost, level)
			}
			break
		}
		body := e.InlineBody
		if ok && (len(queues) > 0 || held) && body == nil {
			if body, err = g.ReadBody(e.Body); err != nil {
				if last == 0 {
					return false, fmt.Errorf("outbox key %d: %w", e.Key, err)
				}
				break
			}
		}
		if last != 0 && bytes+len(body) > handOffBytes {
			break
		}
		bytes += len(body)
		last = e.Key
		if held {
			// The delayed exchange that holds it is the metadata
			// group's: that log routes the whole entry, holding it
			// there and putting the copies the way finds beside it
			// where they belong, once.
			if targets[group.DefaultID] == nil {
				order = append(order, group.DefaultID)
			}
			targets[group.DefaultID] = append(targets[group.DefaultID], e.RouteHandOffCommand(source, body))
			continue
		}

		byGroup := map[string][]string{}
		for _, q := range queues {
			g := n.QueueGroup(e.Vhost, q)
			if _, seen := byGroup[g]; !seen && targets[g] == nil {
				order = append(order, g)
			}
			byGroup[g] = append(byGroup[g], q)
		}
		for g, qs := range byGroup {
			targets[g] = append(targets[g], e.HandOffCommand(source, body, qs))
		}
	}
	for _, g := range order {
		res, err := n.SubmitGroup(ctx, g, targets[g])
		if err != nil {
			return false, fmt.Errorf("to group %q: %w", g, err)
		}
		for _, r := range res {
			if r.GetCode() != 0 {
				return false, fmt.Errorf("to group %q: %w", g, &refusedError{r})
			}
		}
	}
	res, err := g.Submitter().SubmitBatch(ctx, []*proto.Command{{Cmd: &proto.Command_HandOffDone{HandOffDone: &proto.HandOffDone{UpTo: last}}}})
	if err != nil {
		return false, fmt.Errorf("acknowledging up to key %d: %w", last, err)
	}
	if res[0].GetCode() != 0 {
		return false, fmt.Errorf("acknowledging up to key %d: %w", last, &refusedError{res[0]})
	}
	return int(res[0].GetMessageCount()) < waiting, nil
}
