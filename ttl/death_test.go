package ttl

import (
	"reflect"
	"strconv"
	"testing"
)

// Sentences of RabbitMQ's dead-lettering guide quoted below:
const (
	dlxPrepend = `dlx guide: "New entries are prepended to the beginning of the x-death array."`
	dlxMerge   = `dlx guide: "In case x-death already contains an entry with the same queue and dead lettering reason, its count field will be incremented and it will be moved to the beginning of the array."`
	dlxPair    = `dlx guide: "This array contains an entry for each dead lettering event, identified by a pair of {queue, reason}."`
	dlxCycle   = `dlx guide: "Messages in such cycles (i.e. messages that reach the same queue twice) will be dropped if there was no rejections in the entire cycle."`
)

func death(q, reason string, count, sec int64) Death {
	return Death{Queue: q, Reason: reason, Exchange: "ex-" + q, RoutingKeys: []string{"rk-" + q}, Count: count, TimeSec: sec}
}

func TestRecordDeath(t *testing.T) {
	first := Death{Queue: "work", Reason: ReasonExpired, Exchange: "orders", RoutingKeys: []string{"order.new", "cc"}, TimeSec: 100, OriginalExpiration: "5000"}
	cases := []struct {
		name, seed string
		in         []Death
		d          Death
		want       []Death
	}{
		{
			"first death", `seeds/003: x-death entry {"reason":"expired","queue":"original-queue-name",...,"count":1,"original-expiration":"5000"}`,
			nil, first,
			[]Death{{Queue: "work", Reason: ReasonExpired, Exchange: "orders", RoutingKeys: []string{"order.new", "cc"}, Count: 1, TimeSec: 100, OriginalExpiration: "5000"}},
		},
		{
			"new pair prepended", dlxPrepend,
			[]Death{death("a", ReasonExpired, 1, 10)}, death("b", ReasonRejected, 0, 20),
			[]Death{death("b", ReasonRejected, 1, 20), death("a", ReasonExpired, 1, 10)},
		},
		{
			"same queue other reason is a new entry", dlxPair,
			[]Death{death("a", ReasonExpired, 2, 10)}, death("a", ReasonMaxLen, 5, 20),
			[]Death{death("a", ReasonMaxLen, 1, 20), death("a", ReasonExpired, 2, 10)},
		},
		{
			"same reason other queue is a new entry", dlxPair,
			[]Death{death("a", ReasonExpired, 2, 10)}, death("b", ReasonExpired, 0, 20),
			[]Death{death("b", ReasonExpired, 1, 20), death("a", ReasonExpired, 2, 10)},
		},
		{
			"merge increments, keeps first time, moves to front", dlxMerge,
			[]Death{death("b", ReasonRejected, 1, 20), death("a", ReasonExpired, 3, 10), death("c", ReasonMaxLen, 1, 5)},
			Death{Queue: "a", Reason: ReasonExpired, Exchange: "other", RoutingKeys: []string{"x"}, TimeSec: 99, OriginalExpiration: "1"},
			[]Death{death("a", ReasonExpired, 4, 10), death("b", ReasonRejected, 1, 20), death("c", ReasonMaxLen, 1, 5)},
		},
		{
			"merge at the front stays at the front", dlxMerge,
			[]Death{death("a", ReasonExpired, 1, 10), death("b", ReasonExpired, 1, 5)}, death("a", ReasonExpired, 0, 30),
			[]Death{death("a", ReasonExpired, 2, 10), death("b", ReasonExpired, 1, 5)},
		},
		{
			"legacy duplicates collapse into the first", dlxPair + " (entries written before the grouping are grouped)",
			[]Death{death("a", ReasonExpired, 0, 30), death("b", ReasonExpired, 1, 20), death("a", ReasonExpired, 0, 10), death("a", ReasonExpired, 0, 5)},
			death("c", ReasonRejected, 0, 40),
			[]Death{death("c", ReasonRejected, 1, 40), death("a", ReasonExpired, 3, 30), death("b", ReasonExpired, 1, 20)},
		},
		{
			"legacy duplicates keep a count they have", dlxPair,
			[]Death{death("a", ReasonExpired, 7, 30), death("a", ReasonExpired, 1, 10)},
			death("a", ReasonExpired, 0, 40),
			[]Death{death("a", ReasonExpired, 8, 30)},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := cloneDeaths(c.in)
			got := RecordDeath(c.in, c.d)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%s\n got %+v\nwant %+v", c.seed, got, c.want)
			}
			if !reflect.DeepEqual(c.in, in) {
				t.Fatalf("input mutated: %+v, was %+v", c.in, in)
			}
			// The result shares no routing-key storage with the inputs.
			for i := range got {
				if len(got[i].RoutingKeys) > 0 {
					got[i].RoutingKeys[0] = "changed"
				}
			}
			if !reflect.DeepEqual(c.in, in) {
				t.Fatalf("result aliases the input: %+v", c.in)
			}
			if c.d.RoutingKeys != nil && c.d.RoutingKeys[0] == "changed" {
				t.Fatal("result aliases the new death's routing keys")
			}
		})
	}
}

func TestRecordDeathRepeatedLoop(t *testing.T) {
	// dlxMerge: a message bouncing between q1 (expired) and q2 (rejected)
	// keeps two entries whose counts grow, the latest at the front.
	var xs []Death
	for i := range 5 {
		xs = RecordDeath(xs, death("q1", ReasonExpired, 0, int64(10*i)))
		xs = RecordDeath(xs, death("q2", ReasonRejected, 0, int64(10*i+5)))
	}
	want := []Death{death("q2", ReasonRejected, 5, 5), death("q1", ReasonExpired, 5, 0)}
	if !reflect.DeepEqual(xs, want) {
		t.Fatalf("%s\n got %+v\nwant %+v", dlxMerge, xs, want)
	}
}

func cloneDeaths(in []Death) []Death {
	if in == nil {
		return nil
	}
	out := make([]Death, len(in))
	for i, d := range in {
		d.RoutingKeys = cloneStrings(d.RoutingKeys)
		out[i] = d
	}
	return out
}

func TestCycle(t *testing.T) {
	cases := []struct {
		name, seed string
		deaths     []Death
		target     string
		want       bool
	}{
		{"no deaths", dlxCycle, nil, "q", false},
		{"expired back into the same queue", dlxCycle + ` ("this can happen when a queue dead-letters messages to the default exchange without specifying a dead-letter routing key")`,
			[]Death{death("q", ReasonExpired, 1, 1)}, "q", true},
		{"rejected back into the same queue", dlxCycle,
			[]Death{death("q", ReasonRejected, 1, 1)}, "q", false},
		{"target never seen", dlxCycle,
			[]Death{death("a", ReasonExpired, 1, 2), death("b", ReasonExpired, 1, 1)}, "q", false},
		{"two-queue expiry loop", dlxCycle,
			[]Death{death("b", ReasonExpired, 1, 2), death("a", ReasonExpired, 1, 1)}, "a", true},
		{"two-queue loop with a rejection on the way", dlxCycle,
			[]Death{death("b", ReasonRejected, 1, 2), death("a", ReasonExpired, 1, 1)}, "a", false},
		{"rejection at the target entry breaks the cycle", dlxCycle,
			[]Death{death("b", ReasonExpired, 1, 2), death("a", ReasonRejected, 1, 1)}, "a", false},
		{"rejection beyond the cycle does not count", dlxCycle,
			[]Death{death("b", ReasonMaxLen, 1, 3), death("a", ReasonExpired, 1, 2), death("z", ReasonRejected, 1, 1)}, "a", true},
		{"maxlen loop", dlxCycle,
			[]Death{death("a", ReasonMaxLen, 2, 1)}, "a", true},
	}
	for _, c := range cases {
		if got := Cycle(c.deaths, c.target); got != c.want {
			t.Errorf("%s: %s: Cycle(%v) = %v, want %v", c.name, c.seed, c.target, got, c.want)
		}
	}
}

func TestCycleAfterRecordDeath(t *testing.T) {
	// dlxCycle, checked on the list that records the current death: a
	// message rejected by a client and dead-lettered back to its own queue
	// is delivered again; one that expired there is dropped.
	rej := RecordDeath(nil, death("q", ReasonRejected, 0, 1))
	if Cycle(rej, "q") {
		t.Error("rejected message routed back to its queue counted as a cycle")
	}
	exp := RecordDeath(rej, death("q", ReasonExpired, 0, 2))
	if !Cycle(exp, "q") {
		t.Error("expired message routed back to its queue not counted as a cycle")
	}
	if Cycle(exp, "other") {
		t.Error("a queue the message never died in counted as a cycle")
	}
}

func TestRecordDeathLongList(t *testing.T) {
	// dlxPair and dlxMerge on a list longer than the allocation-free path
	// handles: 20 queues, with later duplicates of q3 and q7 (no counts).
	var in []Death
	for i := range 20 {
		in = append(in, death("q"+strconv.Itoa(i), ReasonExpired, 0, int64(100-i)))
	}
	in = append(in, death("q3", ReasonExpired, 0, 1), death("q7", ReasonExpired, 0, 1))
	got := RecordDeath(in, death("q7", ReasonExpired, 0, 500))
	want := []Death{death("q7", ReasonExpired, 3, 93)}
	for i := range 20 {
		switch i {
		case 7:
		case 3:
			want = append(want, death("q3", ReasonExpired, 2, 97))
		default:
			want = append(want, death("q"+strconv.Itoa(i), ReasonExpired, 1, int64(100-i)))
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s\n got %+v\nwant %+v", dlxMerge, got, want)
	}
}
