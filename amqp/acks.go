package amqp

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

// ackSender hands a channel's acknowledgements to the log from a goroutine
// of its own.
//
// The worker used to submit each run of acks and wait for it to commit
// before it took the next methods. Under load a commit takes tens of
// milliseconds; the acks that came meanwhile filled the worker's queue
// (maxBatch) and the connection's reader stopped reading, so a consumer
// with prefetch 100 could not pass much more than maxBatch acks per commit
// (about 8,000 a second with four publishers at full speed) however fast
// the log was. Now the worker queues a run here and goes on; the sender
// submits what queued as one batch, with up to maxAckFlights batches in
// flight, so acks and the credit they return keep up with the log whatever
// a commit takes.
//
// Batches in flight together may reach the log in either order. That is
// safe because the reader translated every acknowledgement into the log
// tags it names, and each tag is named once: settling disjoint sets of
// deliveries commutes (only messages nacked back to the queue by batches
// in flight together may return in either order). Every method but
// basic.publish first waits until the queued acks are answered (flush),
// so a close, recover, cancel or commit follows them in the log; and the
// channel's worker, when it ends, waits for the sender to submit what it
// holds, so a connection's close follows its acks as before. An ack the
// log refuses is raised by the worker as soon as the sender reports it;
// one whose commit outcome is unknown is resolved from the log
// (resolveAcks), never by closing the connection.
type ackSender struct {
	// submit hands a run to the logs and returns the exception to raise,
	// nil when there is none (channel.submitAcks); failed tells the worker
	// one waits (channel.kick).
	submit func(run []item) *wire.Error
	failed func()

	mu      sync.Mutex
	changed sync.Cond // queue, flights, err or ending changed
	queue   []item
	spare   []item // a submitted run's array, emptied, for the next queue
	flights int    // submissions in flight
	waiting bool   // the worker waits in flush or drain
	err     *wire.Error
	started bool
	ending  bool
	done    chan struct{} // closed when the goroutine returns
}

func newAckSender(submit func(run []item) *wire.Error, failed func()) *ackSender {
	a := &ackSender{submit: submit, failed: failed, done: make(chan struct{})}
	a.changed.L = &a.mu
	return a
}

// add queues a run of acknowledgements (already translated to the log's
// tags by the reader). Worker only.
func (a *ackSender) add(run []item) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queue = append(a.queue, run...)
	if !a.started {
		a.started = true
		go a.run()
	}
	a.changed.Broadcast()
}

// maxAckFlights bounds a channel's ack batches in flight.
const maxAckFlights = 4

// maxSpareRun bounds the array an ackSender keeps for its next queue: a
// burst's larger one goes to the collector.
const maxSpareRun = 4096

func (a *ackSender) run() {
	defer close(a.done)
	var flights sync.WaitGroup
	a.mu.Lock()
	for {
		for (len(a.queue) == 0 || a.flights >= maxAckFlights) && !(a.ending && len(a.queue) == 0) {
			a.changed.Wait()
		}
		if len(a.queue) == 0 {
			a.mu.Unlock()
			flights.Wait()
			return
		}
		run := a.queue
		a.queue, a.spare = a.spare, nil
		a.flights++
		flights.Add(1)
		go func() {
			defer flights.Done()
			e := a.submit(run)
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.spare == nil && cap(run) <= maxSpareRun {
				// Nothing holds the run once submitted: the next queue
				// fills its array instead of growing a new one.
				clear(run)
				a.spare = run[:0]
			}
			a.flights--
			if e != nil && a.err == nil {
				a.err = e
				a.failed()
			}
			a.changed.Broadcast()
		}()
	}
}

// flush waits until every queued acknowledgement is answered, or one
// failed, and returns the first failure not yet raised. Worker only.
func (a *ackSender) flush() *wire.Error { return a.await(false) }

// drain waits until every queued acknowledgement is answered, whatever
// failed meanwhile, and returns the first failure not yet raised. A
// closing channel drains before its close goes to the log: flush stops at
// the first failure so that the worker raises it at once, and a close
// sent then would overtake the acks still in flight; the log would return
// their deliveries, which the client saw and which the close does not
// name, without the redelivered flag. Worker only.
func (a *ackSender) drain() *wire.Error { return a.await(true) }

func (a *ackSender) await(pastFailures bool) *wire.Error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for (len(a.queue) > 0 || a.flights > 0) && (pastFailures || a.err == nil) {
		a.waiting = true
		a.changed.Wait()
	}
	a.waiting = false
	e := a.err
	a.err = nil
	return e
}

// failure returns a failure not yet raised, without waiting. Worker only.
func (a *ackSender) failure() *wire.Error {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.err
	a.err = nil
	return e
}

// end lets the goroutine submit what it holds and waits for it to return.
// Worker only, when it ends.
func (a *ackSender) end() {
	a.mu.Lock()
	a.ending = true
	started := a.started
	a.changed.Broadcast()
	a.mu.Unlock()
	if started {
		<-a.done
	}
}

// submitAcks sends a run of basic.ack, basic.nack and basic.reject to the
// logs, one batch per group whose deliveries they name (a run of the
// metadata group's alone is one batch, as before queue groups), and
// returns the exception for the first one refused. Settling disjoint
// deliveries commutes, so the groups' batches may commit in any order;
// each is submitted even when another is refused.
func (ch *channel) submitAcks(run []item) *wire.Error {
	var first *wire.Error
	for _, g := range splitGroups(run) {
		if e := ch.submitGroupAcks(g.group, g.items); e != nil && first == nil {
			first = e
		}
	}
	if first != nil || ch.c.ctx.Err() != nil {
		// Refused, or the connection ended: some may not have reached
		// the log, and the close must count them as seen (seen.go).
		ch.noteUnsettled(run)
	}
	return first
}

// groupItems are the items of one group, in their order.
type groupItems struct {
	group uint32
	items []item
}

// splitGroups splits run by the group of each item, groups ascending and
// each group's items in their order.
func splitGroups(run []item) []groupItems {
	if len(run) > 0 && !slices.ContainsFunc(run, func(it item) bool { return it.group != run[0].group }) {
		return []groupItems{{group: run[0].group, items: run}}
	}
	var out []groupItems
	for _, it := range run {
		i, found := slices.BinarySearchFunc(out, it.group, func(g groupItems, group uint32) int { return cmp.Compare(g.group, group) })
		if !found {
			out = slices.Insert(out, i, groupItems{group: it.group})
		}
		out[i].items = append(out[i].items, it)
	}
	return out
}

// submitGroupAcks sends acknowledgements of group's deliveries to its
// log as one batch and returns the exception for the first one refused.
// The plain acks of the run travel as one Settle naming all their tags
// (mergeSettles): a consumer acks each message alone, and a command per
// ack was validated on the leader, encoded, decoded by every follower and
// applied with a result of its own, per message.
func (ch *channel) submitGroupAcks(group uint32, run []item) *wire.Error {
	cmds, firsts, groups := mergeSettles(run)
	results, err := ch.c.srv.submitTo(ch.c.ctx, group, cmds)
	if err != nil {
		return ch.resolveAcks(group, firsts, cmds, err)
	}
	for i, r := range results {
		if r.GetCode() == 0 {
			continue
		}
		if g := groups[i]; len(g) > 1 {
			// A Settle settles all its tags or none (fsm takeTags), so
			// nothing of the merged one was settled: its acks go again one
			// by one, as they came, and the first refused one is raised.
			return ch.submitEach(group, g)
		}
		if e, handled := ch.takenBack(firsts[i]); handled {
			if e != nil {
				return e
			}
			continue
		}
		return resultError(firsts[i].m, r)
	}
	return nil
}

// submitEach submits each acknowledgement of run, all of group's
// deliveries, as its own command.
func (ch *channel) submitEach(group uint32, run []item) *wire.Error {
	cmds := make([]*proto.Command, len(run))
	for i, it := range run {
		cmds[i] = it.cmd
	}
	results, err := ch.c.srv.submitTo(ch.c.ctx, group, cmds)
	if err != nil {
		return ch.resolveAcks(group, run, cmds, err)
	}
	for i, r := range results {
		if r.GetCode() == 0 {
			continue
		}
		if e, handled := ch.takenBack(run[i]); handled {
			if e != nil {
				return e
			}
			continue
		}
		return resultError(run[i].m, r)
	}
	return nil
}

// takenBack answers for an acknowledgement the log refused because a
// consumer timeout took some of its deliveries back first: the client
// acked them as the timeout was applied, and RabbitMQ 4.3 ignores such a
// late ack. The refusal was applied here (Submit returns then), so the
// ledger knows what the timeout took; what is left, as the log holds it
// (stillUnacked), goes again. handled is false for any other refusal.
func (ch *channel) takenBack(it item) (e *wire.Error, handled bool) {
	tags := ackTags(it.cmd)
	ch.mu.Lock()
	took := ch.led.wasReclaimed(it.group, tags)
	ch.mu.Unlock()
	if !took {
		return nil, false
	}
	lefts, err := ch.stillUnacked(it.group, []*proto.Command{it.cmd})
	if err != nil {
		return ch.resolveAcks(it.group, []item{it}, []*proto.Command{it.cmd}, err), true
	}
	left := lefts[0]
	if len(left) == 0 {
		return nil, true
	}
	results, err := ch.c.srv.submitTo(ch.c.ctx, it.group, []*proto.Command{withAckTags(it.cmd, left)})
	if err != nil {
		return ch.resolveAcks(it.group, []item{it}, []*proto.Command{withAckTags(it.cmd, left)}, err), true
	}
	if r := results[0]; r.GetCode() != 0 {
		return resultError(it.m, r), true
	}
	return nil, true
}

// mergeSettles folds the plain acknowledgements of run (Settle commands
// naming tags) into one Settle naming all their tags, placed where the
// first of them was; nacks and rejects stay as they are. The tags of a
// channel's acknowledgements are disjoint, so settling them together is
// settling them one after the other. It returns the commands, for each
// the item it answers for (the first it carries) and, for the merged one,
// the items it carries (nil for the others).
func mergeSettles(run []item) (cmds []*proto.Command, firsts []item, groups [][]item) {
	plain, tags := 0, 0
	for _, it := range run {
		if t, ok := plainAck(it); ok {
			plain++
			tags += t
		}
	}
	if plain == len(run) && plain > 1 && tags <= maxSettleTags {
		// Every item a plain ack (a consumer acking each message): one
		// Settle, and the run itself is what it carries.
		all := make([]uint64, 0, tags)
		for _, it := range run {
			all = append(all, it.cmd.GetSettle().GetTags()...)
		}
		m := &proto.Settle{Channel: run[0].cmd.GetSettle().GetChannel(), Tags: all}
		return []*proto.Command{{Cmd: &proto.Command_Settle{Settle: m}}}, run[:1:1], [][]item{run}
	}
	// The others as they come, and a Settle per maxSettleTags of plain tags.
	n := len(run) - plain + 1 + tags/maxSettleTags
	cmds, firsts, groups = make([]*proto.Command, 0, n), make([]item, 0, n), make([][]item, 0, n)
	merged := -1 // index in cmds of the Settle that takes the next plain ack
	for _, it := range run {
		t, ok := plainAck(it)
		if !ok {
			cmds, firsts, groups = append(cmds, it.cmd), append(firsts, it), append(groups, nil)
			continue
		}
		if merged >= 0 && len(cmds[merged].GetSettle().GetTags())+t > maxSettleTags {
			merged = -1
		}
		if merged < 0 {
			merged = len(cmds)
			cmds, firsts, groups = append(cmds, it.cmd), append(firsts, it), append(groups, make([]item, 1, plain))
			groups[merged][0] = it
			plain--
			continue
		}
		m := cmds[merged].GetSettle()
		if len(groups[merged]) == 1 {
			// The item's own command stays as it was, for submitEach.
			own := m.GetTags()
			m = &proto.Settle{Channel: m.GetChannel(), Tags: append(make([]uint64, 0, min(tags, maxSettleTags)), own...)}
			cmds[merged] = &proto.Command{Cmd: &proto.Command_Settle{Settle: m}}
		}
		m.Tags = append(m.Tags, it.cmd.GetSettle().GetTags()...)
		groups[merged] = append(groups[merged], it)
		plain--
	}
	return cmds, firsts, groups
}

// plainAck reports whether it is a plain ack (a Settle of its own tags,
// not multiple), which mergeSettles may fold into another, and how many
// tags it names.
func plainAck(it item) (tags int, ok bool) {
	s := it.cmd.GetSettle()
	if s == nil || len(s.GetTags()) == 0 || s.GetMultiple() || s.GetDeliveryTag() != 0 {
		return 0, false
	}
	return len(s.GetTags()), true
}

// maxSettleTags bounds the tags of one merged Settle, far below what a
// command may name (fsm.MaxListLen).
const maxSettleTags = 1 << 16

// resolveAcks settles a run of acknowledgements of group's deliveries
// whose submission to its log failed without saying whether it committed
// (a leader change, a lost quorum).
// Closing the connection for it, as this server once did, redelivered
// everything every consumer held at each failover. Instead the log is
// asked (stillUnacked): once a command proposed after the failure has
// committed and been applied where the state is read, the fate of the
// failed one is decided (it committed before that command, or it never
// will), and the applied state tells which of its deliveries are still
// this channel's. Those are settled again; the others are done. It
// retries, with backoff, until that works or the connection ends.
func (ch *channel) resolveAcks(group uint32, run []item, cmds []*proto.Command, err error) *wire.Error {
	backoff := 20 * time.Millisecond
	for {
		if ch.c.ctx.Err() != nil {
			return nil
		}
		ch.c.logger().Info("acknowledgements of unknown outcome: resolving them from the log", "channel", ch.id, "group", group, "count", len(cmds), "err", err)
		var left [][]uint64
		if left, err = ch.stillUnacked(group, cmds); err == nil {
			var again []*proto.Command
			var items []item
			for i, cmd := range cmds {
				if len(left[i]) > 0 {
					again = append(again, withAckTags(cmd, left[i]))
					items = append(items, run[i])
				}
			}
			if len(again) == 0 {
				return nil
			}
			var results []*proto.Result
			if results, err = ch.c.srv.submitTo(ch.c.ctx, group, again); err == nil {
				return ch.refusedAgain(group, items, again, results)
			}
			cmds, run = again, items
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ch.c.ctx.Done():
			t.Stop()
			return nil
		}
		backoff = min(2*backoff, time.Second)
	}
}

// refusedAgain answers for acknowledgements settled again after an
// unknown outcome (resolveAcks): one the log refused because the first
// attempt committed after all (the log decided it late) leaves nothing to
// do; one whose deliveries the log still holds for the channel was
// refused for its own sake and is raised.
func (ch *channel) refusedAgain(group uint32, items []item, cmds []*proto.Command, results []*proto.Result) *wire.Error {
	var refused []*proto.Command
	var which []item
	var res []*proto.Result
	for i, r := range results {
		if r.GetCode() != 0 {
			refused, which, res = append(refused, cmds[i]), append(which, items[i]), append(res, r)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	left, err := ch.stillUnacked(group, refused)
	if err != nil {
		return ch.resolveAcks(group, which, refused, err)
	}
	for i := range refused {
		if len(left[i]) > 0 {
			return resultError(which[i].m, res[i])
		}
	}
	return nil
}

// stillUnacked returns, for each of cmds, those of the tags it names that
// group's log still holds as the channel's unacknowledged deliveries, as
// its applied state is once a Tick proposed now has been applied where it
// is read: here when this node runs the log, else on a member
// (FarUnacked). This node's Unacked cannot read a log it does not run and
// reports every tag held, so a settlement that had committed after all
// would be taken for one the log refused, and the channel closed with
// 406 under a consumer that did nothing wrong.
func (ch *channel) stillUnacked(group uint32, cmds []*proto.Command) ([][]uint64, error) {
	b := ch.c.srv.node()
	ref := ch.ref()
	var all []uint64
	for _, cmd := range cmds {
		all = append(all, ackTags(cmd)...)
	}
	far, here, err := b.FarUnacked(ch.c.ctx, group, ref, all)
	if err != nil {
		return nil, err
	}
	out := make([][]uint64, len(cmds))
	if !here {
		held := make(map[uint64]bool, len(far))
		for _, t := range far {
			held[t] = true
		}
		for i, cmd := range cmds {
			for _, t := range ackTags(cmd) {
				if held[t] {
					out[i] = append(out[i], t)
				}
			}
		}
		return out, nil
	}
	tick := &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
	if group == 0 {
		_, err = b.Submit(ch.c.ctx, tick)
	} else {
		_, err = b.SubmitGroup(ch.c.ctx, group, []*proto.Command{tick})
	}
	if err != nil {
		return nil, err
	}
	for i, cmd := range cmds {
		out[i] = b.Unacked(group, ref, ackTags(cmd))
	}
	return out, nil
}

// ackTags returns the log tags an acknowledgement's command names.
func ackTags(cmd *proto.Command) []uint64 {
	switch {
	case cmd.GetSettle() != nil:
		return cmd.GetSettle().GetTags()
	case cmd.GetRequeue() != nil:
		return cmd.GetRequeue().GetTags()
	case cmd.GetDiscard() != nil:
		return cmd.GetDiscard().GetTags()
	}
	return nil
}

// withAckTags is cmd naming only tags.
func withAckTags(cmd *proto.Command, tags []uint64) *proto.Command {
	c := gproto.Clone(cmd).(*proto.Command)
	switch {
	case c.GetSettle() != nil:
		c.GetSettle().Tags = tags
	case c.GetRequeue() != nil:
		c.GetRequeue().Tags = tags
	case c.GetDiscard() != nil:
		c.GetDiscard().Tags = tags
	}
	return c
}
