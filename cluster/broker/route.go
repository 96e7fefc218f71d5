package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// Commands and the groups they go to. The AMQP server sends every
// command here without knowing where queues live (DESIGN.md, "A channel
// across groups"): what acts on a queue's messages (consume, get, purge,
// a consumer's credit and cancel) goes to the log of the queue's group,
// a queue's declare and delete to the metadata log and to that group, a
// channel's or connection's close and basic.recover to every group, and
// everything else (publishes included: the metadata log routes them, and
// hands the copies for placed queues to their groups) to the metadata
// log. Settlements name their group themselves (SubmitGroup): the log
// tags they carry are that log's.

// consumers remembers the group of each consumer this node's channels
// opened in a queue group, for its credit and cancel, which name the
// consumer and not its queue.
type consumers struct {
	mu sync.Mutex
	by map[string]string // consumerKey -> group id
}

func channelKey(ch *proto.ChannelRef) string {
	return ch.GetNode() + "\x00" + ch.GetConnection() + "\x00" + fmt.Sprint(ch.GetChannel()) + "\x00"
}

func consumerKey(c *proto.ConsumerRef) string { return channelKey(c.GetChannel()) + c.GetTag() }

func (cs *consumers) set(c *proto.ConsumerRef, id string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.by == nil {
		cs.by = map[string]string{}
	}
	cs.by[consumerKey(c)] = id
}

func (cs *consumers) get(c *proto.ConsumerRef) string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.by[consumerKey(c)]
}

// forget drops the consumers whose key starts with prefix.
func (cs *consumers) forget(prefix string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for k := range cs.by {
		if strings.HasPrefix(k, prefix) {
			delete(cs.by, k)
		}
	}
}

// everywhere is the group of commands every group applies.
const everywhere = "\x00all"

// destination is the group a command goes to: a group id (the metadata
// group's is group.DefaultID) or everywhere.
func (b *Broker) destination(ctx context.Context, cmd *proto.Command) string {
	switch c := cmd.GetCmd().(type) {
	case *proto.Command_Consume:
		return b.queueGroup(ctx, c.Consume.GetVhost(), c.Consume.GetQueue())
	case *proto.Command_Get:
		return b.queueGroup(ctx, c.Get.GetVhost(), c.Get.GetQueue())
	case *proto.Command_QueuePurge:
		return b.queueGroup(ctx, c.QueuePurge.GetVhost(), c.QueuePurge.GetName())
	case *proto.Command_Cancel:
		return b.consumers.get(c.Cancel.GetConsumer())
	case *proto.Command_Credit:
		return b.consumers.get(c.Credit.GetConsumer())
	case *proto.Command_ChannelClosed, *proto.Command_ConnectionClosed:
		return everywhere
	case *proto.Command_Requeue:
		if c.Requeue.GetAll() {
			return everywhere
		}
	}
	return group.DefaultID
}

// queueGroup is the group of a queue as this node's metadata places it.
// A queue this node does not know may have been declared a moment ago
// on another node (a client that declares on one node and consumes on
// another): a Tick through the metadata log comes back once this node
// applied everything committed before it, and the queue is looked up
// again. Still unknown, it goes to the metadata log, which refuses it.
func (b *Broker) queueGroup(ctx context.Context, vhost, name string) string {
	id, ok := b.node.QueuePlacement(vhost, name)
	if ok {
		return id
	}
	if err := b.node.CatchUp(ctx); err != nil {
		return group.DefaultID
	}
	id, _ = b.node.QueuePlacement(vhost, name)
	return id
}

// placing reports whether commands may go elsewhere than the metadata
// log: until the log places queues (once on, placement stays on), every
// command takes the path it always took.
func (b *Broker) placing() bool {
	if b.placed.Load() {
		return true
	}
	if !b.node.HasQueueGroups() {
		// No queue group, no placement: a publish need not wait for
		// the state's lock behind an apply to learn it.
		return false
	}
	var on bool
	b.node.View(func(m *fsm.Machine) { on = m.Placing() })
	if on {
		b.placed.Store(true)
	}
	return on
}

// submitRouted submits cmds, each to the log of its group, and returns
// their results in order. Within one group the commands keep their order
// and are one unit; across groups nothing is atomic, as RabbitMQ's
// transactions are not across queues.
//
// A publish that reaches queues placed in queue groups is routed here,
// on the metadata this node applied (fsm PublishRoute), and enqueued in
// each group's log it reaches (Enqueue): the metadata log does not carry
// it, and its confirm comes once every one of those logs committed it.
// The queues the metadata group holds take theirs through an Enqueue in
// the metadata log. Whatever only the metadata log can decide (an
// exchange missing, a delayed exchange that holds the message, no queue
// to take it) goes there as a publish, as before. Routing on the node's
// view is what RabbitMQ does (a channel routes on its node's copy of the
// bindings): a binding made a moment before on another node may be
// missed.
func (b *Broker) submitRouted(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	if !b.placing() {
		return b.node.SubmitBatch(ctx, cmds)
	}
	parts := b.parts(ctx, cmds)
	if len(parts) == len(cmds) && !slices.ContainsFunc(parts, func(p part) bool {
		return p.dest != group.DefaultID || queueVerb(p.cmd)
	}) && (len(cmds) > 1 || !onQueueMessages(cmds[0])) {
		return b.node.SubmitBatch(ctx, cmds)
	}
	results := make([]*proto.Result, len(cmds))
	// Consecutive parts bound for one group go as one unit.
	for i := 0; i < len(parts); {
		j := i + 1
		for j < len(parts) && parts[j].dest == parts[i].dest && !queueVerb(parts[j].cmd) && !queueVerb(parts[i].cmd) {
			j++
		}
		batch := make([]*proto.Command, 0, j-i)
		for _, p := range parts[i:j] {
			batch = append(batch, p.cmd)
		}
		res, err := b.submitTo(ctx, parts[i].dest, batch)
		if err != nil {
			return nil, err
		}
		for k, r := range res {
			of := parts[i+k].of
			results[of] = mergeResults(results[of], r)
		}
		i = j
	}
	return results, nil
}

// part is a command, or one group's share of a publish, with the group
// it goes to and the command of the batch it answers for.
type part struct {
	dest string
	cmd  *proto.Command
	of   int
}

// parts splits cmds into what goes to each group, in order: a publish
// routed to queues of queue groups becomes an Enqueue per group.
func (b *Broker) parts(ctx context.Context, cmds []*proto.Command) []part {
	routes := make([]map[string][]string, len(cmds))
	var publishes bool
	for _, cmd := range cmds {
		_, ok := cmd.GetCmd().(*proto.Command_Publish)
		publishes = publishes || ok
	}
	if publishes {
		b.node.View(func(m *fsm.Machine) {
			for i, cmd := range cmds {
				if p := cmd.GetPublish(); p != nil {
					if byGroup, ok := m.PublishRoute(p); ok && (len(byGroup) > 1 || byGroup[group.DefaultID] == nil) {
						routes[i] = byGroup
					}
				}
			}
		})
	}
	parts := make([]part, 0, len(cmds))
	for i, cmd := range cmds {
		if routes[i] == nil {
			parts = append(parts, part{dest: b.destination(ctx, cmd), cmd: cmd, of: i})
			continue
		}
		p := cmd.GetPublish()
		for _, g := range slices.Sorted(maps.Keys(routes[i])) {
			parts = append(parts, part{dest: g, of: i, cmd: &proto.Command{Cmd: &proto.Command_Enqueue{Enqueue: &proto.Enqueue{
				Vhost: p.GetVhost(), Exchange: p.GetExchange(), RoutingKey: p.GetRoutingKey(),
				Properties: p.GetProperties(), Body: p.GetBody(), Queues: routes[i][g]}}}})
		}
	}
	return parts
}

// mergeResults is the result of a command some parts of which went to
// several groups: refused if one refused it, routed if one routed it,
// rejected (nacked) if a queue rejected it, as RabbitMQ nacks a publish
// one of whose queues rejected it.
func mergeResults(a, b *proto.Result) *proto.Result {
	switch {
	case a == nil:
		return b
	case a.GetCode() != 0:
		return a
	case b.GetCode() != 0:
		return b
	}
	a.Routed = a.GetRouted() || b.GetRouted()
	a.Rejected = a.GetRejected() || b.GetRejected()
	return a
}

// queueVerb is a queue's declare or delete, which go through the
// metadata log and the queue's group one at a time.
func queueVerb(cmd *proto.Command) bool {
	switch cmd.GetCmd().(type) {
	case *proto.Command_QueueDeclare, *proto.Command_QueueDelete:
		return true
	}
	return false
}

// submitTo submits cmds, all bound for dest, and keeps what later
// commands need to find their group.
//
// A command on a queue's messages (consume, get, purge) goes where this
// node's metadata places the queue, and that may be a log the queue has
// just left or not yet reached: deleted and declared again through
// another node, it lives in another group. The log it was sent to
// refuses it, and a refusal changes nothing there. The metadata log
// names the group the queue lives in (Result.placed_in), and the command
// goes there; a queue group answers that it holds no such queue, and the
// node catches up with the metadata log and, when that places the queue
// elsewhere now, sends the command there. The client sees what the
// queue's own log answers, as RabbitMQ's one copy of the metadata would
// give it, not the node's stale view.
func (b *Broker) submitTo(ctx context.Context, dest string, cmds []*proto.Command) ([]*proto.Result, error) {
	for tries := 1; ; tries++ {
		res, err := b.submitToOnce(ctx, dest, cmds)
		if err != nil || tries == movedTries || len(cmds) != 1 || res[0].GetCode() == 0 || dest == everywhere {
			return res, err
		}
		vhost, name, ok := onMessages(cmds[0])
		if !ok {
			return res, nil
		}
		now := res[0].GetPlacedIn()
		if now == "" {
			if dest == group.DefaultID || b.node.CatchUp(ctx) != nil {
				return res, nil
			}
			now, _ = b.node.QueuePlacement(vhost, name)
		}
		if now == dest {
			return res, nil
		}
		dest = now
	}
}

// movedTries bounds how often a command follows its queue to another
// log: each move is a delete and a declare through another node within
// the command's round trip.
const movedTries = 5

// onQueueMessages reports whether cmd acts on a queue's messages
// (onMessages).
func onQueueMessages(cmd *proto.Command) bool {
	_, _, ok := onMessages(cmd)
	return ok
}

// onMessages names the queue of a command that acts on a queue's
// messages and is refused where the queue is not.
func onMessages(cmd *proto.Command) (vhost, name string, ok bool) {
	switch c := cmd.GetCmd().(type) {
	case *proto.Command_Consume:
		return c.Consume.GetVhost(), c.Consume.GetQueue(), true
	case *proto.Command_Get:
		return c.Get.GetVhost(), c.Get.GetQueue(), true
	case *proto.Command_QueuePurge:
		return c.QueuePurge.GetVhost(), c.QueuePurge.GetName(), true
	}
	return "", "", false
}

func (b *Broker) submitToOnce(ctx context.Context, dest string, cmds []*proto.Command) ([]*proto.Result, error) {
	if len(cmds) == 1 {
		switch c := cmds[0].GetCmd().(type) {
		case *proto.Command_QueueDeclare:
			r, err := b.declare(ctx, cmds[0], c.QueueDeclare)
			return []*proto.Result{r}, err
		case *proto.Command_QueueDelete:
			r, err := b.delete(ctx, cmds[0], c.QueueDelete)
			return []*proto.Result{r}, err
		}
	}
	var res []*proto.Result
	var err error
	if dest == everywhere {
		res, err = b.broadcast(ctx, cmds)
	} else {
		res, err = b.node.SubmitGroup(ctx, dest, cmds)
	}
	if err != nil {
		return nil, err
	}
	for i, cmd := range cmds {
		switch c := cmd.GetCmd().(type) {
		case *proto.Command_Consume:
			if dest != group.DefaultID && res[i].GetCode() == 0 {
				b.consumers.set(c.Consume.GetConsumer(), dest)
			}
		case *proto.Command_Cancel:
			b.consumers.forget(consumerKey(c.Cancel.GetConsumer()))
		case *proto.Command_ChannelClosed:
			b.consumers.forget(channelKey(c.ChannelClosed.GetChannel()))
		case *proto.Command_ConnectionClosed:
			ref := c.ConnectionClosed.GetConnection()
			b.consumers.forget(ref.GetNode() + "\x00" + ref.GetConnection() + "\x00")
		}
	}
	return res, nil
}

// broadcast submits cmds to the metadata log and to every queue group
// the metadata names, run here or not (a channel of this node may consume
// in any); the metadata log's results are the answer.
func (b *Broker) broadcast(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	res, err := b.node.SubmitBatch(ctx, cmds)
	if err != nil {
		return nil, err
	}
	for _, id := range b.node.NamedQueueGroups() {
		gres, err := b.node.SubmitGroup(ctx, id, cmds)
		if err != nil {
			return nil, fmt.Errorf("group %s: %w", id, err)
		}
		if err := b.closeBelowSeenLevel(ctx, id, cmds, gres); err != nil {
			return nil, fmt.Errorf("group %s: %w", id, err)
		}
	}
	return res, nil
}

// closeBelowSeenLevel sends again, without the list, a close naming what
// its client saw that group id refused: a group whose log is not at
// level 22 yet (it follows the metadata log's level a moment later), on
// a node that does not run it and so cannot leave the list out before.
// The close must reach every log, or the connection's consumers stay in
// that one. The metadata log's refusal needs none of this: it is the
// answer, and the connection's recordEnd sends the close again.
// Its result takes the refusal's place in res.
func (b *Broker) closeBelowSeenLevel(ctx context.Context, id string, cmds []*proto.Command, res []*proto.Result) error {
	for i, r := range res {
		if r.GetCode() == 0 || i >= len(cmds) {
			continue
		}
		c := fsm.WithoutSeen(cmds[i])
		if c == nil {
			continue
		}
		again, err := b.node.SubmitGroup(ctx, id, []*proto.Command{c})
		if err != nil {
			return err
		}
		res[i] = again[0]
	}
	return nil
}

// placeWait bounds how long a declare waits for its queue's group to
// take the queue (a group without a leader takes nothing).
const placeWait = 30 * time.Second

// declare declares a queue in the metadata log and, when the log placed
// it in a queue group, makes sure the group holds it and answers with the
// group's counts: declare-ok comes once the queue can take messages.
//
// A group that answers 404 after the metadata took the declare has
// ended the queue (its lease ran out there) or deleted it since: the
// metadata drops its record in a moment (fsm lease.go), and a declare
// that is not passive is made again until the metadata declares the
// queue anew, for up to placeWait, as RabbitMQ creates a queue declared
// after its expiry. A passive one answers 404: the queue is gone.
func (b *Broker) declare(ctx context.Context, cmd *proto.Command, d *proto.QueueDeclare) (*proto.Result, error) {
	deadline := time.Now().Add(placeWait)
	wait := 5 * time.Millisecond
	for {
		res, gone, err := b.declareOnce(ctx, cmd, d)
		if err != nil || !gone || d.GetPassive() || d.GetName() == "" || !time.Now().Before(deadline) {
			return res, err
		}
		if err := pause(ctx, &wait); err != nil {
			return nil, err
		}
	}
}

// pause waits *wait, or until ctx ends, and doubles it up to 200 ms: the
// pause before asking again for a queue its group answered 404 for.
func pause(ctx context.Context, wait *time.Duration) error {
	t := time.NewTimer(*wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	*wait = min(2**wait, 200*time.Millisecond)
	return nil
}

// declareOnce is one round of declare: the metadata log's, then the
// group's; gone reports that the group answered 404.
func (b *Broker) declareOnce(ctx context.Context, cmd *proto.Command, d *proto.QueueDeclare) (_ *proto.Result, gone bool, _ error) {
	res, err := b.node.Submit(ctx, cmd)
	if err != nil || res.GetCode() != 0 {
		return res, false, err
	}
	name := d.GetName()
	if res.GetQueue() != "" {
		name = res.GetQueue()
	}
	id := b.node.QueueGroup(d.GetVhost(), name)
	if id == group.DefaultID {
		return res, false, nil
	}
	pctx, cancel := context.WithTimeout(ctx, placeWait)
	gr, ran, err := b.node.PlaceQueue(pctx, id, d.GetVhost(), name)
	cancel()
	if err != nil {
		return nil, false, err
	}
	if gr == nil {
		// The group held the queue already, or this node does not run
		// it: a passive declare there gives its counts (and is a use of
		// the queue in the log that decides its lease).
		if gr, err = b.inGroup(ctx, id, d.GetVhost(), name, ran); err != nil {
			return nil, false, err
		}
	}
	if gr.GetCode() != 0 {
		return gr, gr.GetCode() == replycode.NotFound, nil
	}
	res.MessageCount, res.ConsumerCount = gr.GetMessageCount(), gr.GetConsumerCount()
	return res, false, nil
}

// inGroup is a passive declare of a queue the metadata placed in group
// id, in the group's log: its counts there. When this node did not run
// the group as it placed the queue (ran false), the queue comes with the
// group leader's mirror, a moment after the metadata entry: a queue not
// there yet is asked for again, for up to placeWait, while the metadata
// keeps the record the declare found (a queue whose lease ended in the
// group is never mirrored again: the metadata drops its record instead).
func (b *Broker) inGroup(ctx context.Context, id, vhost, name string, ran bool) (*proto.Result, error) {
	deadline := time.Now().Add(placeWait)
	wait := 5 * time.Millisecond
	record := b.record(vhost, name)
	for {
		gr, err := b.node.SubmitGroup(ctx, id, []*proto.Command{{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{
			Vhost: vhost, Name: name, Passive: true}}}})
		if err != nil {
			return nil, err
		}
		if gr[0].GetCode() != replycode.NotFound || ran || time.Now().After(deadline) || b.record(vhost, name) != record {
			return gr[0], nil
		}
		if err := pause(ctx, &wait); err != nil {
			return nil, err
		}
	}
}

// placedRecord is a placed queue's record in the metadata log: its group
// and the entry that placed it (fsm Machine.PlacedAt).
type placedRecord struct {
	group string
	at    uint64
	ok    bool
}

// record reads queue name of vhost's record as this node applied the
// metadata log.
func (b *Broker) record(vhost, name string) (r placedRecord) {
	b.node.View(func(m *fsm.Machine) { r.group, r.at, r.ok = m.PlacedAt(vhost, name) })
	return r
}

// delete deletes a placed queue from the metadata log, with its
// bindings, and then from its group, where its messages and consumers
// are. if-unused and if-empty are read from the group as this node
// applied it, before: RabbitMQ checks them on the queue's leader, and a
// consumer that attaches meanwhile is as unlucky there. The metadata goes
// first so that the group's leader, which mirrors the metadata into the
// group, never declares the queue again in between; it deletes it from
// the group itself should this node die after the first step.
func (b *Broker) delete(ctx context.Context, cmd *proto.Command, d *proto.QueueDelete) (*proto.Result, error) {
	id := b.node.QueueGroup(d.GetVhost(), d.GetName())
	if id == group.DefaultID {
		return b.node.Submit(ctx, cmd)
	}
	var refusal *proto.Result
	inUse := func(consumers uint32) {
		if d.GetIfUnused() && consumers > 0 {
			refusal = &proto.Result{Code: replycode.PreconditionFailed, Text: "PRECONDITION_FAILED - queue '" + d.GetName() + "' in vhost '" + d.GetVhost() + "' in use"}
		}
	}
	notEmpty := func(messages uint64) {
		if refusal == nil && d.GetIfEmpty() && messages > 0 {
			refusal = &proto.Result{Code: replycode.PreconditionFailed, Text: "PRECONDITION_FAILED - queue '" + d.GetName() + "' in vhost '" + d.GetVhost() + "' not empty"}
		}
	}
	runs := b.node.ViewGroup(id, func(m *fsm.Machine) {
		if q, ok := m.Queue(d.GetVhost(), d.GetName()); ok {
			inUse(q.GetConsumers())
			notEmpty(q.GetReady() + q.GetUnacked())
		}
	})
	if !runs && (d.GetIfUnused() || d.GetIfEmpty()) {
		// Read from the group's leader: its ready messages and
		// consumers, as a passive declare gives them.
		gr, err := b.node.SubmitGroup(ctx, id, []*proto.Command{{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{
			Vhost: d.GetVhost(), Name: d.GetName(), Passive: true}}}})
		if err != nil {
			return nil, err
		}
		if gr[0].GetCode() == 0 {
			inUse(gr[0].GetConsumerCount())
			notEmpty(uint64(gr[0].GetMessageCount()))
		}
	}
	if refusal != nil {
		return refusal, nil
	}
	res, err := b.node.Submit(ctx, cmd)
	if err != nil || res.GetCode() != 0 {
		return res, err
	}
	gr, err := b.node.SubmitGroup(ctx, id, []*proto.Command{{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{
		Vhost: d.GetVhost(), Name: d.GetName()}}}})
	if err != nil {
		return nil, err
	}
	res.MessageCount = gr[0].GetMessageCount()
	return res, nil
}
