package fault

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// noTTL marks a message published without an expiration.
const noTTL = time.Duration(-1)

// sent is one published message as its publisher saw it.
type sent struct {
	id string
	// queue is where the message was routed: workQueue or delayQueue.
	queue string
	// ttl is the message's effective TTL in queue (the lower of its
	// expiration and the queue's x-message-ttl), or noTTL.
	ttl time.Duration
	// at is when the publish was written; confirmed when the broker's ack
	// arrived (zero if it never did, or a nack did).
	at        time.Time
	confirmed time.Time
}

func (s *sent) ttlText() string {
	if s.ttl == noTTL {
		return "no ttl"
	}
	return "ttl " + s.ttl.String()
}

// delivery is one message a consumer received.
type delivery struct {
	id          string
	queue       string
	redelivered bool
	at          time.Time
	// reason is the first x-death reason of a dead-lettered message.
	reason string
	// node is the node the consumer was connected to.
	node string
}

// recorder collects what the workload's clients saw.
type recorder struct {
	mu         sync.Mutex
	sent       map[string]*sent
	deliveries []delivery
	confirms   []time.Time
}

func newRecorder() *recorder { return &recorder{sent: map[string]*sent{}} }

func (r *recorder) published(s *sent) {
	r.mu.Lock()
	r.sent[s.id] = s
	r.mu.Unlock()
}

func (r *recorder) confirmed(id string, at time.Time) {
	r.mu.Lock()
	if s := r.sent[id]; s != nil {
		s.confirmed = at
		r.confirms = append(r.confirms, at)
	}
	r.mu.Unlock()
}

func (r *recorder) delivered(d delivery) {
	r.mu.Lock()
	r.deliveries = append(r.deliveries, d)
	r.mu.Unlock()
}

// confirmedCount is how many publishes have been confirmed so far.
func (r *recorder) confirmedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.confirms)
}

// missing returns how many confirmed messages no consumer has received yet
// (from their queue, or dead-lettered).
func (r *recorder) missing() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return unreceived(r.sent, r.deliveries, func(s *sent) bool { return !s.confirmed.IsZero() }, func(d delivery) string { return d.id })
}

// unreceived counts the messages of sent (by id) that were confirmed
// and that no delivery of got names: what a drain still waits for. Both
// scenarios' recorders ask it of their own records.
func unreceived[S, D any](sent map[string]S, got []D, confirmed func(S) bool, id func(D) string) int {
	seen := make(map[string]bool, len(got))
	for _, d := range got {
		seen[id(d)] = true
	}
	n := 0
	for k, s := range sent {
		if confirmed(s) && !seen[k] {
			n++
		}
	}
	return n
}

// limits are what a scenario's checker tolerates.
type limits struct {
	// deliveryGrace is how long after its deadline a delivery may reach a
	// client: the deadline is decided in log time, the client's clock reads
	// it after apply on the consumer's node and a trip over the network.
	deliveryGrace time.Duration
	// deathLate, when set, bounds the 99th percentile of how long after
	// its deadline a dead letter reached a client, over the messages
	// confirmed within fastConfirm of their publish: their deadline (log
	// stamp plus TTL) is known to within that, while a publish held up by
	// the fault was stamped at some unknown moment before its confirm.
	deathLate time.Duration
	// heldLate, when set, bounds the latest of the dead letters first
	// received redelivered, which deathLate leaves out: a consumer on a
	// silent node held them, and they went to another consumer only once
	// the node was declared down. RabbitMQ returns a quorum queue's
	// checked-out messages when their consumer's node disconnects; raftmq
	// when it has been silent for NodeDownAfter, which a hold adds to a
	// death's lateness. Few as they are, they would make the 99th
	// percentile of a run with few samples.
	heldLate time.Duration
	// pause, when set, bounds the longest stretch without a confirm from
	// the fault on, less noProcess.
	pause time.Duration
	// noProcess is how long fewer than a majority of the nodes' processes
	// ran during the fault (withoutMajority): docker's time, which the
	// broker cannot shorten.
	noProcess time.Duration
}

// fastConfirm is the confirm latency under which a message's publish time
// stands for its log stamp in the dead-letter lateness.
const fastConfirm = 200 * time.Millisecond

// lateDeath is a dead letter counted in the lateness, with its deadline.
type lateDeath struct {
	d        delivery
	deadline time.Time
}

// latestDeaths describes the latest percent of the dead letters counted in
// the lateness, the ones a missed bound is about: when their deadlines
// fell from the fault's start, which nodes' consumers received them, and
// how many came redelivered (held by a consumer that was cut off).
func latestDeaths(lates []lateDeath, fault time.Time) string {
	if len(lates) == 0 {
		return "no samples"
	}
	sort.Slice(lates, func(i, j int) bool {
		return lates[i].d.at.Sub(lates[i].deadline) > lates[j].d.at.Sub(lates[j].deadline)
	})
	top := lates[:max(1, len(lates)/100)]
	nodes := map[string]int{}
	redelivered := 0
	first, last := top[0].deadline, top[0].deadline
	firstAt, lastAt := top[0].d.at, top[0].d.at
	for _, l := range top {
		nodes[l.d.node]++
		if l.d.redelivered {
			redelivered++
		}
		if l.deadline.Before(first) {
			first = l.deadline
		}
		if l.deadline.After(last) {
			last = l.deadline
		}
		if l.d.at.Before(firstAt) {
			firstAt = l.d.at
		}
		if l.d.at.After(lastAt) {
			lastAt = l.d.at
		}
	}
	names := make([]string, 0, len(nodes))
	for n, k := range nodes {
		names = append(names, fmt.Sprintf("%s %d", n, k))
	}
	sort.Strings(names)
	// The fault's start in UTC, to the millisecond, places them against
	// the nodes' logs (dumpLogs).
	return fmt.Sprintf("the latest %d: deadlines %v to %v and receipts %v to %v from the fault's start (%s), %d redelivered, received through %s",
		len(top), first.Sub(fault).Round(time.Millisecond), last.Sub(fault).Round(time.Millisecond),
		firstAt.Sub(fault).Round(time.Millisecond), lastAt.Sub(fault).Round(time.Millisecond),
		fault.UTC().Format("15:04:05.000"), redelivered, strings.Join(names, ", "))
}

// report is one scenario's outcome, a row of the printed table.
type report struct {
	scenario      string
	published     int
	confirmed     int
	consumed      int // confirmed messages received from their own queue
	deadLettered  int // confirmed messages received through the dead-letter exchange
	lost          int // confirmed, never received
	duplicated    int // deliveries beyond the first of a message in a queue
	unflaggedDups int // of those, how many lacked the redelivered flag
	late          int // deliveries after deadline + grace
	wrongReason   int // dead letters whose x-death reason is not "expired"
	maxPause      time.Duration
	// latenessP99 is the dead-letter receipt minus the deadline, over the
	// lateSamples dead letters confirmed within fastConfirm and received
	// unflagged (the receipt of that copy); heldLateMax is the latest of
	// the held ones, received only redelivered (limits.heldLate).
	latenessP99 time.Duration
	lateSamples int
	heldLateMax time.Duration
	heldSamples int
	nodesBack   bool // every node came back after the fault
	// ledAgain is how long after one node went down every group had a
	// leader on another node (ledMeasured: the scenario measures it;
	// ledAgain 0: not within the fault).
	ledAgain    time.Duration
	ledMeasured bool
	leases      []leaseResult
}

// leaseResult is what happened to one x-expires queue.
type leaseResult struct {
	name string
	// used: a client kept doing basic.get on it; it must outlive the test.
	used bool
	// declared is when queue.declare was sent, expires its x-expires.
	declared time.Time
	expires  time.Duration
	// gone is when a passive declare first found it missing (zero: never).
	gone time.Time
	// allowed is the lateness tolerated for this queue.
	allowed time.Duration
}

// violations lists what is wrong with a lease's fate.
func (l leaseResult) violations() []string {
	switch {
	case l.used && !l.gone.IsZero():
		return []string{fmt.Sprintf("queue %s was in use but was deleted after %v", l.name, l.gone.Sub(l.declared))}
	case l.used:
		return nil
	case l.gone.IsZero():
		return []string{fmt.Sprintf("unused queue %s (x-expires %v) was never deleted", l.name, l.expires)}
	case l.gone.Before(l.declared.Add(l.expires)):
		return []string{fmt.Sprintf("unused queue %s (x-expires %v) was deleted early, after %v", l.name, l.expires, l.gone.Sub(l.declared))}
	case l.gone.After(l.declared.Add(l.expires + l.allowed)):
		return []string{fmt.Sprintf("unused queue %s (x-expires %v) was deleted %v late (allowed %v)", l.name, l.expires, l.gone.Sub(l.declared.Add(l.expires)), l.allowed)}
	}
	return nil
}

// check reads the records against the rules and returns the scenario's row
// and every violation found. pauseFrom starts the window in which the
// longest stretch without a confirm is measured (the fault's start).
func (r *recorder) check(scenario string, lim limits, pauseFrom, pauseTo time.Time) (report, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := report{scenario: scenario, published: len(r.sent), nodesBack: true}
	var bad []string

	type seenKey struct{ id, queue string }
	seen := map[seenKey]int{}
	// A message is delivered unflagged once, its first delivery; any
	// later one is flagged. Which copy the test receives first says
	// nothing of that: each consumer's connection hands its deliveries
	// over on its own goroutine, and amqp091-go may hand one read before
	// its connection's close after it (its consumer buffer races the
	// close), once a redelivery elsewhere has been recorded. So every
	// unflagged copy past the first is a repeat without the flag,
	// whatever the order of receipt.
	unflagged := map[seenKey]delivery{}
	received := map[string]string{} // id -> "own" or "dead"
	var lateness []time.Duration
	var lates, held []lateDeath
	// The dead letters the lateness counts (confirmed within
	// fastConfirm), in the order first received, with their first
	// unflagged and first flagged copies. The unflagged one, where there
	// is one, was the first delivery, whichever was recorded first
	// (above); a death received only flagged was held by a consumer cut
	// off with it.
	type firstCopies struct{ unflagged, flagged *delivery }
	deaths := map[string]firstCopies{}
	var dead []string
	for _, d := range r.deliveries {
		s := r.sent[d.id]
		if s == nil {
			bad = append(bad, fmt.Sprintf("delivery of %q, which was never published", d.id))
			continue
		}
		k := seenKey{d.id, d.queue}
		seen[k]++
		if seen[k] > 1 {
			rep.duplicated++
		}
		if !d.redelivered {
			if f, again := unflagged[k]; again {
				rep.unflaggedDups++
				bad = append(bad, fmt.Sprintf("%s delivered again from %s without the redelivered flag: first unflagged through %s at %s, again through %s %v later",
					d.id, d.queue, f.node, f.at.Format("15:04:05.000"), d.node, d.at.Sub(f.at).Round(time.Millisecond)))
			} else {
				unflagged[k] = d
			}
		}
		if d.queue == deadQueue {
			if d.reason != "expired" {
				rep.wrongReason++
				bad = append(bad, fmt.Sprintf("%s dead-lettered with reason %q, want expired", d.id, d.reason))
			}
			if s.ttl != noTTL && !s.confirmed.IsZero() && s.confirmed.Sub(s.at) <= fastConfirm {
				if _, ok := deaths[d.id]; !ok {
					dead = append(dead, d.id)
				}
				f := deaths[d.id]
				switch {
				case !d.redelivered && f.unflagged == nil:
					f.unflagged = &d
				case d.redelivered && f.flagged == nil:
					f.flagged = &d
				}
				deaths[d.id] = f
			}
			if received[d.id] == "" {
				received[d.id] = "dead"
			}
			continue
		}
		received[d.id] = "own"
		// The deadline is the log stamp of the publish plus the TTL, and
		// the stamp is no later than the confirm.
		if s.ttl != noTTL && !s.confirmed.IsZero() && d.at.After(s.confirmed.Add(s.ttl+lim.deliveryGrace)) {
			rep.late++
			bad = append(bad, fmt.Sprintf("%s (%s) delivered by %s %v after it was confirmed (redelivered %v)", d.id, s.ttlText(), d.node, d.at.Sub(s.confirmed), d.redelivered))
		}
	}
	for _, id := range dead {
		s, f := r.sent[id], deaths[id]
		deadline := s.at.Add(s.ttl)
		if f.unflagged != nil {
			lateness = append(lateness, f.unflagged.at.Sub(deadline))
			lates = append(lates, lateDeath{d: *f.unflagged, deadline: deadline})
			continue
		}
		held = append(held, lateDeath{d: *f.flagged, deadline: deadline})
		rep.heldLateMax = max(rep.heldLateMax, f.flagged.at.Sub(deadline))
	}
	ids := make([]string, 0, len(r.sent))
	for id := range r.sent {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := r.sent[id]
		if s.confirmed.IsZero() {
			continue
		}
		rep.confirmed++
		switch received[id] {
		case "own":
			rep.consumed++
		case "dead":
			rep.deadLettered++
		default:
			rep.lost++
			if rep.lost <= 20 {
				bad = append(bad, fmt.Sprintf("confirmed message %s (to %s, %s) was lost", id, s.queue, s.ttlText()))
			}
		}
	}
	if rep.lost > 20 {
		bad = append(bad, fmt.Sprintf("... %d confirmed messages lost in all", rep.lost))
	}
	rep.latenessP99 = percentile(lateness, 0.99)
	rep.lateSamples = len(lateness)
	rep.heldSamples = len(held)
	rep.maxPause = longestGap(r.confirms, pauseFrom, pauseTo)
	if lim.deathLate > 0 && rep.latenessP99 > lim.deathLate {
		bad = append(bad, fmt.Sprintf("dead letters reached a client %v after their deadline at the 99th percentile (of %d confirmed within %v), more than %v; %s",
			rep.latenessP99.Round(time.Millisecond), rep.lateSamples, fastConfirm, lim.deathLate, latestDeaths(lates, pauseFrom)))
	}
	if lim.heldLate > 0 && rep.heldLateMax > lim.heldLate {
		bad = append(bad, fmt.Sprintf("a dead letter a silent node held reached a client %v after its deadline (of %d held, confirmed within %v), more than %v; %s",
			rep.heldLateMax.Round(time.Millisecond), rep.heldSamples, fastConfirm, lim.heldLate, latestDeaths(held, pauseFrom)))
	}
	if lim.pause > 0 && rep.maxPause-lim.noProcess > lim.pause {
		msg := fmt.Sprintf("no confirm for %v, more than %v", rep.maxPause.Round(time.Millisecond), lim.pause)
		if lim.noProcess > 0 {
			msg = fmt.Sprintf("no confirm for %v, of which no majority of nodes ran for %v: more than %v with a majority running",
				rep.maxPause.Round(time.Millisecond), lim.noProcess.Round(time.Millisecond), lim.pause)
		}
		bad = append(bad, msg)
	}
	return rep, bad
}

// percentile returns the q-quantile of ds (0 when empty).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[i]
}

// longestGap is the longest stretch of [from, to] with no time in ts.
func longestGap(ts []time.Time, from, to time.Time) time.Duration {
	s := slices.Clone(ts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	prev, longest := from, time.Duration(0)
	for _, t := range s {
		if t.Before(from) {
			continue
		}
		if t.After(to) {
			break
		}
		if g := t.Sub(prev); g > longest {
			longest = g
		}
		prev = t
	}
	if g := to.Sub(prev); g > longest {
		longest = g
	}
	return longest
}

// writeTable prints reports as a table: dups counts repeated deliveries,
// unflagged those of them without the redelivered flag; death-late-p99 is
// over the dead letters confirmed within fastConfirm and received
// unflagged, held-late-max the latest of those received only redelivered
// (a silent node's consumer held them), with their count.
func writeTable(w io.Writer, reps []report) {
	fmt.Fprintf(w, "%-20s %9s %9s %9s %9s %5s %5s %9s %5s %10s %14s %14s %10s %9s %s\n",
		"scenario", "published", "confirmed", "consumed", "dead-lttr", "lost", "dups", "unflagged", "late", "max-pause", "death-late-p99", "held-late-max", "nodes-back", "led-again", "x-expires")
	for _, r := range reps {
		var ls []string
		for _, l := range r.leases {
			switch {
			case l.used && l.gone.IsZero():
				ls = append(ls, l.name+" kept")
			case l.gone.IsZero():
				ls = append(ls, l.name+" never deleted")
			default:
				ls = append(ls, fmt.Sprintf("%s +%v", l.name, l.gone.Sub(l.declared.Add(l.expires)).Round(time.Millisecond)))
			}
		}
		back := "yes"
		if !r.nodesBack {
			back = "NO"
		}
		led := "-"
		switch {
		case r.ledMeasured && r.ledAgain == 0:
			led = "never"
		case r.ledMeasured:
			led = r.ledAgain.Round(10 * time.Millisecond).String()
		}
		held := "-"
		if r.heldSamples > 0 {
			held = fmt.Sprintf("%v (%d)", r.heldLateMax.Round(time.Millisecond), r.heldSamples)
		}
		fmt.Fprintf(w, "%-20s %9d %9d %9d %9d %5d %5d %9d %5d %10v %14v %14s %10s %9s %s\n",
			r.scenario, r.published, r.confirmed, r.consumed, r.deadLettered, r.lost, r.duplicated, r.unflaggedDups, r.late,
			r.maxPause.Round(time.Millisecond), r.latenessP99.Round(time.Millisecond), held, back, led, strings.Join(ls, ", "))
	}
}
