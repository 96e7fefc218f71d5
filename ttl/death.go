package ttl

// Dead-lettering reasons, as they appear in the reason field of x-death and
// in x-first-death-reason.
const (
	// ReasonExpired: the message's TTL passed (or TTL 0 with no consumer).
	ReasonExpired = "expired"
	// ReasonRejected: basic.reject or basic.nack with requeue=false.
	ReasonRejected = "rejected"
	// ReasonMaxLen: dropped from the head by max-length/max-length-bytes.
	ReasonMaxLen = "maxlen"
)

// Death is one entry of the x-death header array.
//
// On the wire it is a field table whose keys RabbitMQ sorts by name:
// "count" (long-long-int), "exchange" (long string), "original-expiration"
// (long string, only when OriginalExpiration != ""), "queue" (long string),
// "reason" (long string), "routing-keys" (array of long strings) and "time"
// (timestamp, seconds). The first death of a message also sets the
// x-first-death-reason, x-first-death-queue and x-first-death-exchange
// headers (long strings); later deaths leave them alone.
type Death struct {
	Queue, Reason, Exchange string
	RoutingKeys             []string
	Count                   int64
	TimeSec                 int64  // AMQP timestamp of the (first) death, seconds
	OriginalExpiration      string // "" when the message had no expiration property
}

// RecordDeath merges a death into an x-death list (most recent first) as
// RabbitMQ 3.x does and returns the new list; it never mutates the input.
//
// The entry for the same queue and reason gets its count incremented and
// moves to the front; it keeps everything else it had (its first time,
// exchange, routing keys, original expiration), so d's other fields are
// dropped. Otherwise d is prepended as a new entry with count 1. Several
// entries for the same queue and reason (written by brokers before RabbitMQ
// 3.5) are first collapsed into the first of them, whose count becomes the
// number of such entries if it had none (Count < 1).
//
// One deliberate difference: RabbitMQ 3.x reverses the order of the other
// entries while collapsing duplicates (a fold that prepends); their order is
// kept here, as RabbitMQ's dead-lettering guide describes and 3.13+ does.
func RecordDeath(deaths []Death, d Death) []Death {
	out := make([]Death, 1, len(deaths)+1) // out[0]: the front, set below
	d.Count = 1
	out[0] = d
	dup := duplicates(deaths)
	for i, e := range deaths {
		if dup != nil {
			if dup[i] == 0 {
				continue // a later duplicate: collapsed into the first
			}
			if e.Count < 1 {
				e.Count = int64(dup[i])
			}
		}
		if e.Count < 1 {
			e.Count = 1
		}
		if e.Queue == d.Queue && e.Reason == d.Reason {
			e.Count++
			out[0] = e
			continue
		}
		out = append(out, e)
	}
	for i := range out {
		out[i].RoutingKeys = cloneStrings(out[i].RoutingKeys)
	}
	return out
}

// duplicates returns nil when every (queue, reason) of deaths is distinct.
// Otherwise it returns, per index, the number of entries sharing that
// entry's key when it is the first of them, and 0 for the later ones.
func duplicates(deaths []Death) []int {
	var out []int
	mark := func(first, later int) {
		if out == nil {
			out = make([]int, len(deaths))
			for n := range out {
				out[n] = 1
			}
		}
		out[first]++
		out[later] = 0
	}
	if len(deaths) <= 16 { // the usual case: a few entries, no allocation
		for i := 1; i < len(deaths); i++ {
			for j := range i {
				if deaths[j].Queue == deaths[i].Queue && deaths[j].Reason == deaths[i].Reason {
					mark(j, i) // j is the first entry with this key
					break
				}
			}
		}
		return out
	}
	type key struct{ queue, reason string }
	first := make(map[key]int, len(deaths))
	for i := range deaths {
		k := key{deaths[i].Queue, deaths[i].Reason}
		if j, seen := first[k]; seen {
			mark(j, i)
		} else {
			first[k] = i
		}
	}
	return out
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}

// Cycle reports whether dead-lettering to targetQueue would be a cycle that
// RabbitMQ drops: targetQueue already appears in x-death and no entry on the
// way (from the front of the list up to and including the first entry for
// targetQueue) has reason "rejected". Call it with the list that already
// records the current death (the result of RecordDeath), as RabbitMQ checks
// the dead-lettered message: a message rejected by a client is then never a
// cycle, and a message that expires in q and is routed back to q is.
// Messages whose route would cycle are dropped for that target queue only.
func Cycle(deaths []Death, targetQueue string) bool {
	for i := range deaths {
		if deaths[i].Reason == ReasonRejected {
			return false
		}
		if deaths[i].Queue == targetQueue {
			return true
		}
	}
	return false
}
