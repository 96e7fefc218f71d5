package amqp

import "sync/atomic"

// Counters are this node's cumulative counts of its clients' connections,
// channels and publisher confirms. They are the node's own, as RabbitMQ's
// node-local metrics are: the replicated state does not see channels that
// only publish, nor confirms.
type Counters struct {
	ConnectionsOpened, ConnectionsClosed uint64
	ChannelsOpened, ChannelsClosed       uint64
	// Confirmed counts the messages confirmed to publishers (basic.ack in
	// confirm mode; one per message however the acks are coalesced).
	Confirmed uint64
	// Returned and Dropped count the publishes the log routed to no
	// queue: returned with basic.return (mandatory) or dropped.
	Returned, Dropped uint64
	// GetEmpty counts the basic.get answered with basic.get-empty.
	GetEmpty uint64
	// QueuesDeclared counts the queue.declare (not passive) that
	// succeeded, whether they created the queue or found it.
	QueuesDeclared uint64
	// CreditRaised and CreditLowered count the Credit commands this node
	// committed for its consumers (credit.go).
	CreditRaised, CreditLowered uint64
}

type counters struct {
	connOpened, connClosed, chOpened, chClosed, confirmed atomic.Uint64
	returned, dropped, getEmpty, queuesDeclared           atomic.Uint64
	creditRaised, creditLowered                           atomic.Uint64
}

// Counters returns the node's counters.
func (s *Server) Counters() Counters {
	c := &s.counts
	return Counters{ConnectionsOpened: c.connOpened.Load(), ConnectionsClosed: c.connClosed.Load(),
		ChannelsOpened: c.chOpened.Load(), ChannelsClosed: c.chClosed.Load(), Confirmed: c.confirmed.Load(),
		Returned: c.returned.Load(), Dropped: c.dropped.Load(), GetEmpty: c.getEmpty.Load(),
		QueuesDeclared: c.queuesDeclared.Load(), CreditRaised: c.creditRaised.Load(), CreditLowered: c.creditLowered.Load()}
}

// Counters returns the node's counters.
func (a Connections) Counters() Counters { return a.s.Counters() }
