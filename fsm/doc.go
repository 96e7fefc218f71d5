// Package fsm is the deterministic broker state machine: it decodes a log
// entry, applies each command to the state (vhosts, users, exchanges, queues,
// bindings, consumers, policies, messages) and emits effects. Given the same
// log it produces byte-identical state on every node: it never reads a clock,
// does I/O, spawns goroutines or lets Go map order leak into state.
//
// What a caller uses:
//
//   - Applying the log: New, Machine.Apply (an Entry, effects to a Sink:
//     Delivery, server cancels, NodeDown, ChannelTimedOut; DiscardSink,
//     DeliveryFilter), Clock, AppliedIndex, ProtocolLevel, Initialized;
//     ReadBody reads a body a Delivery or GetOk names out of its entry.
//   - Before proposing (the leader): Validate with Limits (InvalidError),
//     CommandProtocol and Protocol for rolling upgrades, Unsupported;
//     CheckEntry before applying (UnknownCommandError, LevelError).
//   - Timers the leader turns into commands, all on log time:
//     NextDeadline/DueExpiries (TTL), NextLeaseDue/DueLeases (x-expires),
//     NextConsumerTimeout/DueConsumerTimeouts, NextDelayed and NextRelease
//     (ReleaseDelayed, DelayedReleaseBatch, MaxReleaseBatch).
//   - Snapshots: Snapshot (an io.WriterTo; Releaser, BodyLister),
//     Restore, RestoreBytes, Digest.
//   - Reads for AMQP and the admin surfaces: VhostExists, User,
//     UserPasswordHash, Permission, Queues, Queue, QueueCounts, Exchanges,
//     Bindings, Consumers, Unacked, Policies, Users, Permissions, Vhosts,
//     VhostLimits and VhostLimit, Stats (DeathReasons), Delayed; Releases and KeepReleases (delayed
//     release lateness, ReleaseLatenessBucketsMs).
//   - Queue groups (groups.go): the commands GroupInit, Enqueue (a
//     pre-routed publish), HandOff and HandOffDone; Group, Outbox and
//     OutboxLen (OutboxEntry, HandOffCommand) for the leader that hands
//     the outbox off, HandedOff.
//   - Rules shared with the server: HashPassword, CheckPassword
//     (PasswordHashAlgorithm, PasswordSaltLen), DelayOf and MaxDelay
//     (x-delay), the exchange types (DelayedExchangeType and the picking
//     types, MaxHashWeight), DefaultDeliveryLimit, ReasonDeliveryLimit,
//     RetryLevel, DefaultConsumerTimeout, LookaheadIdleMs, CreditLevel
//     and MaxCredit (Credit, ConsumerLoad), the vhost
//     limits' names (LimitNames, KnownLimit, LimitMaxConnections,
//     LimitMaxQueues).
//
// Where things are: apply.go dispatches each command to an apply_*.go
// handler, one file per kind of entity; state.go is the state,
// levels.go the table of protocol levels and snapshot formats, codec.go
// the snapshot encoding and snapshot.go taking and restoring one. The
// delayed exchanges: apply_delayed.go (apply), delayed_set.go (where
// messages wait, in a queue.Held), delayed_list.go (listings),
// delayed_stats.go (release lateness); exchange_types.go the type rules,
// args.go how argument and header values are read; vhost_limits.go the
// vhosts' limits; groups.go the machine as one group of several (its
// outbox and the hand-offs it applied). DESIGN.md says why.
package fsm
