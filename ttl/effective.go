package ttl

import "math"

// NoDeadline is the deadline of something that never expires; Deadline and
// LeaseDue saturate at it.
const NoDeadline int64 = math.MaxInt64

// Opt is an optional value (Set false: absent).
type Opt struct {
	V   int64
	Set bool
}

// None is the absent Opt.
var None = Opt{}

// Some returns a set Opt holding v.
func Some(v int64) Opt { return Opt{V: v, Set: true} }

// Effective returns the lowest set value (argument, policy, operator policy,
// per-message expiration): the lower wins, as RabbitMQ resolves message-ttl
// and expires between a queue argument, a policy and an operator policy,
// and as the per-message expiration is weighed against the queue's TTL.
// It returns None when no value is set. The order of vals does not matter.
func Effective(vals ...Opt) Opt {
	out := Opt{}
	for _, v := range vals {
		if v.Set && (!out.Set || v.V < out.V) {
			out = v
		}
	}
	return out
}

// Deadline is enqueue + ttl, saturating at NoDeadline (math.MaxInt64). A
// negative ttl counts as 0.
func Deadline(enqueueMs, ttlMs int64) int64 {
	return addSat(enqueueMs, ttlMs)
}

// DeadlineOf is the deadline of a message enqueued at enqueueMs under the
// effective TTL ttl: Deadline(enqueueMs, ttl.V), or NoDeadline when no TTL
// applies.
func DeadlineOf(enqueueMs int64, ttl Opt) int64 {
	if !ttl.Set {
		return NoDeadline
	}
	return addSat(enqueueMs, ttl.V)
}

// LeaseDue is lastUsed + expires (saturating at NoDeadline): when a queue
// unused since lastUsedMs falls due for deletion under an x-expires or
// expires policy of expiresMs.
func LeaseDue(lastUsedMs, expiresMs int64) int64 {
	return addSat(lastUsedMs, expiresMs)
}

// Expired reports whether something with this deadline is dead at now: a
// message whose deadline is <= now is never delivered nor returned by
// basic.get, and a queue whose lease is due at or before now may be deleted.
func Expired(deadline, now int64) bool {
	return deadline <= now
}

func addSat(a, b int64) int64 {
	if b < 0 {
		b = 0
	}
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
