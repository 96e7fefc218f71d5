package fsm

// The log's protocol levels and the snapshot formats, each named by what
// it brought; apply asks atLeast(level...) and the codec has(format...),
// never a bare number. Protocol (validate.go) is the highest level this
// binary applies, snapVersion the format it writes. fsm/DESIGN.md ("The
// log's protocol level", "Snapshot and digest") says what each changed.
const (
	// levelFirst is every log that never raised its level.
	levelFirst uint32 = 1
	// levelTagFloor: SetProtocol; a new channel numbers its deliveries
	// above every removed channel's (tagFloor).
	levelTagFloor uint32 = 2
	// levelFeatures: queues declared from here on have the features of
	// features.go (queueState.features).
	levelFeatures uint32 = 3
	// levelConsumerTimeout: ConsumerTimeout; deliveries record their
	// assignment time, channels their latest settlement.
	levelConsumerTimeout uint32 = 4
	// levelDeaths: deaths counted by reason (Stats.Deaths).
	levelDeaths uint32 = 5
	// levelDelayed: x-delayed-message exchanges, ReleaseDelayed,
	// CancelDelayed and PurgeDelayed.
	levelDelayed uint32 = 6
	// levelLookahead: lookahead credit only while the channel settles
	// (lookahead.go).
	levelLookahead uint32 = 7
	// levelRetry: queues declared from here on count returns as
	// RabbitMQ 4.3 and have delayed retry (apply_retry.go).
	levelRetry uint32 = 8
	// levelSharedDelay: a delayed exchange keeps properties with x-delay's
	// value left out (heldProps).
	levelSharedDelay uint32 = 9
	// levelConsumerCancel: a consumer timeout cancels the consumer whose
	// delivery timed out and returns its deliveries; the channel stays.
	levelConsumerCancel uint32 = 10
	// levelPicking: x-consistent-hash, x-modulus-hash and x-local-random
	// exchanges (apply_pick.go).
	levelPicking uint32 = 11
	// levelVhostLimits: VhostLimits, the vhosts' max-connections and
	// max-queues (vhost_limits.go).
	levelVhostLimits uint32 = 12
	// levelGroups: GroupInit, Enqueue, HandOff and HandOffDone; a queue
	// group's dead letters into exchanges it does not hold leave through
	// its outbox (groups.go).
	levelGroups uint32 = 13
	// levelCredit: Credit, a consumer's credit set while it consumes
	// (apply_credit.go).
	levelCredit uint32 = 14
	// levelQueueGroups: QueueGroups, the queue groups of the cluster
	// (queue_groups.go).
	levelQueueGroups uint32 = 15
	// levelGroupMembers: GroupMembers, a queue group's members set
	// (queue_groups.go).
	levelGroupMembers uint32 = 16
	// levelPlacement: PlaceQueues; with placement on, new queues are
	// placed in queue groups and what the metadata log routes to them
	// leaves through its outbox (placement.go).
	levelPlacement uint32 = 17
	// levelGroupSize: x-quorum-initial-group-size is checked at declare
	// and placement honours it (group_size.go).
	levelGroupSize uint32 = 18
	// levelHandOffRoute: a HandOff with route keys is routed in the
	// target's log, where a delayed exchange on its way holds it
	// (groups.go, applyHandOff).
	levelHandOffRoute uint32 = 19
	// levelLeaderLocator: x-queue-leader-locator is checked at declare
	// and placement honours client-local (leader_locator.go).
	levelLeaderLocator uint32 = 20
	// levelLocatorPolicy: a policy's queue-leader-locator is checked when
	// set and wins over x-queue-leader-locator at placement
	// (leader_locator.go).
	levelLocatorPolicy uint32 = 21
	// levelSeenAtClose: a ChannelClosed or ConnectionClosed may name the
	// deliveries the client was sent (seen_listed); the rest go back
	// unflagged, as deliveries it never saw (apply_consume.go).
	levelSeenAtClose uint32 = 22
	// levelLeases: a queue group runs a placed queue's lease, a policy's
	// expires included, and ends it there (ExpireQueue leaves the queue
	// ended); the metadata log deletes the queue after it
	// (QueueLeaseEnded) and records where it placed each queue
	// (queueState.placedAt, lease.go).
	levelLeases uint32 = 23
	// levelPlaceExpires: a queue with its own x-expires is placed in a
	// queue group like any other, whose log runs its lease (placement.go).
	levelPlaceExpires uint32 = 24
	// levelQos: Credit.prefetch, a consumer's prefetch changed while it
	// consumes (a basic.qos on its channel; apply_credit.go).
	levelQos uint32 = 25
)

// HandOffRouteLevel is levelHandOffRoute for the node, which hands a dead
// letter to the metadata log to route only once that log is at that
// level.
const HandOffRouteLevel = levelHandOffRoute

// CreditLevel is levelCredit for the node, which sends Credit only once
// the log it applied is at that level.
const CreditLevel = levelCredit

// QosLevel is levelQos for the node, which sends Credit.prefetch only
// once the log it applied is at that level.
const QosLevel = levelQos

// RetryLevel is levelRetry for the node, which sends Requeue.failed only
// once the log it applied is at that level.
const RetryLevel = levelRetry

// SeenAtCloseLevel is levelSeenAtClose for the node, which names what a
// closing channel's client was sent only once the log it applied is at
// that level.
const SeenAtCloseLevel = levelSeenAtClose

// PlacementLevel is levelPlacement for the node, which proposes
// PlaceQueues only once the log it applied is at that level.
const PlacementLevel = levelPlacement

// format is a snapshot format version.
type format = uint64

const (
	// formatFirst holds the state as the first release wrote it.
	formatFirst format = 1
	// formatCredit adds each consumer's credit.
	formatCredit format = 2
	// formatTagFloor adds the delivery tag floor.
	formatTagFloor format = 3
	// formatLevel adds the log's protocol level; before it, level 1.
	formatLevel format = 4
	// formatReturns adds each message's returns and each queue's
	// features flag.
	formatReturns format = 5
	// formatSettled adds each channel's settlement time and each unacked
	// delivery's assignment time and held flag (consumer timeout).
	formatSettled format = 6
	// formatBodyRefs names bodies instead of holding them, holds
	// properties encoded, and adds the deaths by reason.
	formatBodyRefs format = 7
	// formatDelayed adds the messages of delayed exchanges.
	formatDelayed format = 8
	// formatRetry adds each queue's retryLevel flag, each message's failed
	// attempts and the messages waiting out a delayed retry.
	formatRetry format = 9
	// formatVhostLimits adds the vhosts' limits.
	formatVhostLimits format = 10
	// formatGroups adds the group id, the outbox and the hand-offs
	// applied per source group.
	formatGroups format = 11
	// formatQueueGroups adds the queue groups the metadata log names.
	formatQueueGroups format = 12
	// formatGroupMembers adds each queue group's epoch, the number of
	// times GroupMembers set its members.
	formatGroupMembers format = 13
	// formatPlacement adds whether placement is on, each queue's group
	// and each outbox entry's target queues.
	formatPlacement format = 14
	// formatLeases adds each queue's placedAt and each vhost's ended
	// queues.
	formatLeases format = 15

	snapVersion = formatLeases
)

// formatFor is the format a state at level writes: the newest one a node
// of the release that could share the cluster at that level reads. Below
// levelDelayed no exchange holds delayed messages and format 7 says as
// much, so a node of the release before, still in the cluster during a
// rolling upgrade, can restore it; likewise below levelRetry nothing
// waits for a delayed retry, below levelVhostLimits no vhost has
// limits, below levelGroups nothing is a group's, in an outbox or
// handed off, below levelQueueGroups the log names no queue group,
// below levelGroupMembers every queue group's epoch is 0, and below
// levelPlacement placement is off (PlaceQueues is refused), so no queue
// is placed and no outbox entry is pre-routed, and below levelLeases no
// queue records where it was placed and none has ended.
func formatFor(level uint32) format {
	switch {
	case level < levelDelayed:
		return formatDelayed - 1
	case level < levelRetry:
		return formatRetry - 1
	case level < levelVhostLimits:
		return formatVhostLimits - 1
	case level < levelGroups:
		return formatGroups - 1
	case level < levelQueueGroups:
		return formatQueueGroups - 1
	case level < levelGroupMembers:
		return formatGroupMembers - 1
	case level < levelPlacement:
		return formatPlacement - 1
	case level < levelLeases:
		return formatLeases - 1
	}
	return snapVersion
}
