package amqp

import (
	"sync"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/proto"
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
// log refuses, or that cannot be committed, is raised by the worker as
// soon as the sender reports it.
type ackSender struct {
	ch *channel

	mu      sync.Mutex
	changed sync.Cond // queue, flights, err or ending changed
	queue   []item
	flights int  // submissions in flight
	waiting bool // the worker waits in flush
	err     *wire.Error
	started bool
	ending  bool
	done    chan struct{} // closed when the goroutine returns
}

func newAckSender(ch *channel) *ackSender {
	a := &ackSender{ch: ch, done: make(chan struct{})}
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
		a.queue = nil
		a.flights++
		flights.Add(1)
		go func() {
			defer flights.Done()
			e := a.ch.submitAcks(run)
			a.mu.Lock()
			defer a.mu.Unlock()
			a.flights--
			if e != nil && a.err == nil {
				a.err = e
				a.ch.kick()
			}
			a.changed.Broadcast()
		}()
	}
}

// flush waits until every queued acknowledgement is answered and returns
// the first failure not yet raised. Worker only.
func (a *ackSender) flush() *wire.Error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for (len(a.queue) > 0 || a.flights > 0) && a.err == nil {
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
// log as one batch and returns the exception for the first one refused.
func (ch *channel) submitAcks(run []item) *wire.Error {
	cmds := make([]*proto.Command, len(run))
	for i, it := range run {
		cmds[i] = it.cmd
	}
	results, err := ch.c.srv.node().SubmitBatch(ch.c.ctx, cmds)
	if err != nil {
		return ch.submitError(run[0].m, err)
	}
	for i, r := range results {
		if r.GetCode() != 0 {
			return resultError(run[i].m, r)
		}
	}
	return nil
}
