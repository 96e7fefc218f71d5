package fsm

// LookaheadIdleMs bounds, in log time, how long a consumer's lookahead
// credit stays open after its channel last showed life (from level 7).
//
// A consumer with lookahead (Consume.credit above its prefetch) is
// assigned up to credit messages, prefetch of which its node writes to
// the client while it holds the rest (amqp/DESIGN.md). When the node
// goes silent (a frozen process, a partition), the log goes on assigning
// to that consumer until its credit is used up, and what it assigned is
// stranded until the cluster declares the node down: up to prefetch ×
// (1 + lookahead) messages per consumer, hundreds or thousands with the
// defaults. The log cannot tell a silent node from a busy one, but a
// consumer that uses its lookahead acks all the time (each ack lets its
// node write the next held delivery). So the lookahead credit counts only
// while the channel settled something, or got its oldest unacknowledged
// delivery, within this bound; past it the consumer gets no more than its
// prefetch until it settles again (which dispatches its queue at once). A
// silent node then strands its prefetch and what was assigned to it in
// its last LookaheadIdleMs, not its whole credit. A consumer that holds
// its prefetch and acks less often than this loses only the lookahead,
// which cannot speed it up.
const LookaheadIdleMs = 500

// capLookahead marks, before a dispatch of q, the consumers whose
// lookahead is idle. Dispatch does not move the clock and settles
// nothing, and a channel it gives a first delivery has its oldest one
// now, so the marks hold for the whole dispatch.
func (s *state) capLookahead(q *queueState) {
	on := s.atLeast(levelLookahead)
	for _, c := range q.consumers {
		c.capped = on && c.prefetch != 0 && c.credit > c.prefetch && lookaheadIdle(c.ch, s.clock)
	}
}

// lookaheadIdle reports whether ch has held unacknowledged deliveries
// for LookaheadIdleMs without settling any.
func lookaheadIdle(ch *channel, now int64) bool {
	if len(ch.unacked) == 0 {
		return false
	}
	return now-max(ch.settled, ch.unacked[0].at) >= LookaheadIdleMs
}
