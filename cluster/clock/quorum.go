package clock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/raftmq/raftmq/internal/broadcast"
	"github.com/raftmq/raftmq/proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clockSampleTimeout bounds one reading of a peer's clock.
const clockSampleTimeout = time.Second

// clockSample is one reading of a voter's wall clock, against this node's
// monotonic clock: the peer's wall time (unix ns) minus the monotonic
// reading halfway through the call. The peer read its clock somewhere in
// the call, so its true offset lies in [lo, hi]: the wall time minus the
// monotonic readings at the answer and at the request.
type clockSample struct {
	offset int64
	lo, hi int64
	at     time.Time // when it was taken (real time: it only ages samples)
}

// reading is the sample of a peer whose wall clock read wall (unix ns)
// during a call sent at m0 and answered at m1 on this node's monotonic
// clock.
func reading(wall int64, m0, m1 time.Duration) clockSample {
	return clockSample{offset: wall - int64(m0+(m1-m0)/2), lo: wall - int64(m1), hi: wall - int64(m0), at: time.Now()}
}

// near is the offset within the reading's bounds closest to own: a peer
// whose clock agrees with this node's within the call's round trip reads
// as this node's clock, not as the middle of the call. The middle is off
// by up to half the round trip, either way, at every reading: log time,
// which follows the quorum's clocks forward at once, would run ahead of
// every clock by that much on a slow call and release a delayed message
// before its due time. A clock truly off reads as off, by no more than
// the middle would.
func (s clockSample) near(own int64) int64 {
	if s.hi <= s.lo {
		return s.offset
	}
	return min(max(own, s.lo), s.hi)
}

// clockEstimate is what the quorum's clocks read, as an offset from this
// node's monotonic clock (unix ns minus monotonic ns).
type clockEstimate struct {
	ok     bool  // a quorum of the voters' clocks was read
	offset int64 // the quorum's
	own    int64 // this node's wall clock's
	// legacy: voters of an earlier release do not answer Clock, and
	// without them no quorum was read: offset is this node's own clock,
	// as those releases stamped.
	legacy bool
	// agreed: a quorum of the voters' clocks read within MaxClockOffset of
	// offset. With every voter read and at most a minority off, it holds;
	// with only a bare quorum read and one of them off, it does not, and
	// nothing tells the right clock from the wrong one.
	agreed bool
}

// quorumClock keeps the latest reading of each voter's wall clock. Every
// node samples (clockLoop), so every node knows whether its own clock is
// fit to lead; the leader's estimate anchors log time (stamp.go).
type quorumClock struct {
	clock     Clock
	self      string
	maxOffset int64
	stale     time.Duration

	mu      sync.Mutex
	voters  []string // the voters of the configuration at the last round
	samples map[string]clockSample
	legacy  map[string]bool
	problem string // why this node's clock is unfit, "" when it is fine
	// agreed is the last estimate a quorum of clocks agreed on, and when
	// it was made: a term starts from it (startLogTime).
	agreed   int64
	agreedAt time.Time
	// kept: leadership was kept with the clock off, for want of a voter
	// to hand it to (warned once).
	kept bool

	rounds    *broadcast.Broadcast // a reading was taken, or a sampling round finished
	roundDone *broadcast.Broadcast // a sampling round finished
	kick      chan struct{}
}

func newQuorumClock(cfg Config) *quorumClock {
	return &quorumClock{
		clock:     cfg.Clock,
		self:      cfg.Self,
		maxOffset: int64(cfg.MaxOffset),
		// A reading ages with the drift between two oscillators; a few
		// missed rounds are harmless, a peer gone for long is not read.
		stale:     max(5*cfg.SampleInterval, 5*time.Second),
		samples:   map[string]clockSample{},
		legacy:    map[string]bool{},
		rounds:    broadcast.New(),
		roundDone: broadcast.New(),
		kick:      make(chan struct{}, 1),
	}
}

// estimate reads the quorum's clocks from the latest samples. Of the k
// voters read (this node, if a voter, counts once, read now), with q a
// majority of all voters, it takes the q-th highest: at least a quorum of
// clocks read that time or later, so no minority of clocks ahead can move
// it forward, and with every voter read no minority behind can hold it
// back (with three voters: the median). Fewer than q read: no estimate.
func (c *quorumClock) estimate() clockEstimate {
	m := c.clock.Monotonic()
	own := c.clock.Now().UnixNano() - int64(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	offs := make([]int64, 0, len(c.voters))
	selfVoter, legacy := false, 0
	for _, id := range c.voters {
		if id == c.self {
			selfVoter = true
			offs = append(offs, own)
			continue
		}
		if s, ok := c.samples[id]; ok && time.Since(s.at) <= c.stale {
			offs = append(offs, s.near(own))
		} else if c.legacy[id] {
			legacy++
		}
	}
	q := len(c.voters)/2 + 1
	switch {
	case len(c.voters) > 0 && len(offs) >= q:
		slices.Sort(offs)
		e := clockEstimate{ok: true, offset: offs[len(offs)-q], own: own}
		near := 0
		for _, o := range offs {
			if abs(o-e.offset) <= c.maxOffset {
				near++
			}
		}
		e.agreed = near >= q
		if e.agreed {
			c.agreed, c.agreedAt = e.offset, time.Now()
		}
		return e
	case selfVoter && len(offs)+legacy >= q:
		return clockEstimate{ok: true, offset: own, own: own, legacy: true}
	}
	return clockEstimate{own: own}
}

// agreedMaxAge bounds how long a node trusts the last estimate a quorum
// agreed on: it is kept against the monotonic clock, which two oscillators
// move apart by at most a few hundred microseconds a minute.
const agreedMaxAge = 10 * time.Minute

// lastAgreed returns the last estimate a quorum of clocks agreed on, if it
// is recent.
func (c *quorumClock) lastAgreed() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.agreedAt.IsZero() || time.Since(c.agreedAt) > agreedMaxAge {
		return 0, false
	}
	return c.agreed, true
}

// best returns the voter other than this node whose clock is closest to
// ref, if it is within the limit: the one to hand leadership to.
func (c *quorumClock) best(ref int64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var id string
	var dist int64
	for _, v := range c.voters {
		s, ok := c.samples[v]
		if v == c.self || !ok || time.Since(s.at) > c.stale {
			continue
		}
		if d := abs(s.offset - ref); d <= c.maxOffset && (id == "" || d < dist) {
			id, dist = v, d
		}
	}
	return id, id != ""
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// forget drops id's reading.
func (c *quorumClock) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.samples, id)
}

// Problem says why this node's wall clock is unfit to lead (it is
// further from the quorum's than MaxOffset), "" when it is fine or no
// quorum of clocks has been read.
func (t *Time) Problem() string {
	t.q.mu.Lock()
	defer t.q.mu.Unlock()
	return t.q.problem
}

// RoundDone returns a channel closed when the next round of clock
// readings finishes.
func (t *Time) RoundDone() <-chan struct{} { return t.q.roundDone.Wait() }

// Run reads the voters' clocks every SampleInterval (and at once when a
// term starts), then checks this node's own against them, until ctx ends
// (the node closes).
func (t *Time) Run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.SampleInterval)
	defer tick.Stop()
	for {
		t.sample(ctx)
		t.check()
		select {
		case <-tick.C:
		case <-t.q.kick:
		case <-ctx.Done():
			return
		}
	}
}

// sample reads the clock of every voter in parallel. A reading is taken
// against this node's monotonic clock at the middle of the call, so it is
// off by at most half the round trip; one whose round trip exceeds
// MaxOffset says too little and is dropped.
func (t *Time) sample(ctx context.Context) {
	c := t.q
	voters, ok := t.cfg.Voters()
	if !ok {
		return
	}
	c.mu.Lock()
	c.voters = voters
	for id := range c.samples {
		if !slices.Contains(voters, id) {
			delete(c.samples, id)
			delete(c.legacy, id)
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range voters {
		if id == t.cfg.Self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			peer, ok := t.cfg.Peer(id)
			if !ok {
				c.forget(id)
				return
			}
			ctx, cancel := context.WithTimeout(ctx, clockSampleTimeout)
			defer cancel()
			m0 := c.clock.Monotonic()
			r, err := peer.Clock(ctx, &proto.ClockRequest{})
			m1 := c.clock.Monotonic()
			// A term that waits for its first reading goes on as soon
			// as a quorum is read, not after the slowest peer.
			defer c.rounds.Signal()
			c.mu.Lock()
			defer c.mu.Unlock()
			switch {
			case status.Code(err) == codes.Unimplemented:
				c.legacy[id] = true
			case err != nil:
				// Unreachable now: its last reading says nothing of
				// whether it is in a quorum now.
				delete(c.samples, id)
			case int64(m1-m0) > c.maxOffset:
				t.cfg.Logger.Debug("clock reading dropped: round trip too long", "peer", id, "rtt", m1-m0)
			default:
				delete(c.legacy, id)
				c.samples[id] = reading(r.GetWallUnixNanos(), m0, m1)
			}
		}()
	}
	wg.Wait()
	c.rounds.Signal()
	c.roundDone.Signal()
}

// check compares this node's wall clock with the quorum's. One further
// off than MaxOffset is reported (log, Problem) and, on
// the leader, hands leadership to the voter whose clock is closest to the
// quorum's. Log time does not follow a lone clock either way; stepping
// down keeps a node whose clock is wrong from leading a cluster whose
// clocks cannot all be read, and tells the operator which node to fix.
//
// When the clocks read do not agree (a bare quorum read, one of them off)
// the leader takes log time as the referee: it was anchored to a quorum's
// clocks before and has advanced by the monotonic clock since, so the
// clock that disagrees with it is the wrong one.
func (t *Time) check() {
	c := t.q
	e := c.estimate()
	ref, against, judged := e.offset, "the quorum's", e.ok && !e.legacy && e.agreed
	leading := t.cfg.Leading()
	if leading && e.ok && !e.legacy && !e.agreed {
		ref, against, judged = t.stamp.offset(), "log time", true
	}
	problem := ""
	if judged {
		if d := time.Duration(e.own - ref); abs(int64(d)) > c.maxOffset {
			dir := "ahead of"
			if d < 0 {
				dir, d = "behind", -d
			}
			problem = fmt.Sprintf("wall clock %v %s %s, more than --max-clock-offset %v", d.Round(time.Millisecond), dir, against, time.Duration(c.maxOffset))
		}
	}
	c.mu.Lock()
	was := c.problem
	c.problem = problem
	if problem == "" {
		c.kept = false
	}
	c.mu.Unlock()
	switch {
	case problem != "" && was == "":
		t.cfg.Logger.Warn("this node will not lead: its clock is off", "problem", problem)
	case problem == "" && was != "":
		t.cfg.Logger.Info("this node's clock agrees with the quorum's again")
	}
	if problem != "" && leading {
		t.handOver(ref, problem)
	}
}

// handOver transfers leadership to the voter whose clock is closest to
// ref and reports whether it did.
func (t *Time) handOver(ref int64, problem string) bool {
	c := t.q
	id, ok := c.best(ref)
	c.mu.Lock()
	warn := !ok && !c.kept
	c.kept = !ok
	c.mu.Unlock()
	if warn {
		// Once per stretch: the check runs every ClockSampleInterval.
		t.cfg.Logger.Warn("clock off, but no voter's clock is fit to take over: keeping leadership", "problem", problem)
	}
	if !ok {
		return false
	}
	t.cfg.Logger.Warn("handing leadership over: this node's clock is off", "to", id, "problem", problem)
	if err := t.cfg.HandOver(id); err != nil {
		t.cfg.Logger.Warn("leadership transfer failed", "to", id, "err", err)
		return false
	}
	return true
}

// StartTerm starts log time for a term at the log's clock (or the last
// time a quorum of clocks agreed on, if later) and waits
// for a reading of the quorum's clocks, so that the term's first stamp is
// anchored to them. Without one within LeaderWait the term goes on from
// the log's clock by the monotonic clock alone, unless the log has no
// time yet (a new cluster): then it keeps waiting, since starting at the
// epoch would make the first reading kill every message. A node whose own
// clock the reading finds off hands leadership over before it serves.
// It returns false when the term ends first or leadership was handed over.
func (t *Time) StartTerm(ctx context.Context, clock int64) bool {
	t.stamp.reset(clock)
	// The log may have been idle since its last stamp. What a quorum's
	// clocks agreed on lately, read by this node as a follower, says how
	// much time has passed since, even when the clocks it can read now
	// do not agree (one of two an hour behind would otherwise leave log
	// time as far behind as the log was idle).
	if off, ok := t.q.lastAgreed(); ok {
		t.stamp.anchor(off)
	}
	t.q.askRound()
	giveUp := time.NewTimer(t.cfg.LeaderWait)
	defer giveUp.Stop()
	warned := false
	for {
		wait := t.q.rounds.Wait()
		if e := t.q.estimate(); e.ok {
			if d := abs(e.own - e.offset); e.agreed && !e.legacy && d > t.q.maxOffset {
				problem := fmt.Sprintf("wall clock %v from the quorum's, more than --max-clock-offset %v", time.Duration(d).Round(time.Millisecond), t.cfg.MaxOffset)
				if t.handOver(e.offset, problem) {
					return false
				}
			}
			return true
		}
		select {
		case <-wait:
		case <-giveUp.C:
			if clock > 0 {
				t.cfg.Logger.Warn("no quorum of clocks read: log time goes on from the log's by this node's monotonic clock")
				return true
			}
			if !warned {
				t.cfg.Logger.Warn("no quorum of clocks read: a new cluster waits for one before it stamps")
				warned = true
			}
		case <-ctx.Done():
			return false
		}
	}
}

// askRound has Run take a round of readings now, unless one is asked
// for already.
func (c *quorumClock) askRound() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// groupTermRetry is how often a queue group's term that waits for a
// reading of the quorum's clocks asks for another round.
const groupTermRetry = 100 * time.Millisecond

// StartGroupTerm starts this node's term as a queue group's leader. The
// node has one stamper for every log it leads, so log time is only raised
// to the group's clock (Floor), never reset. A node that has read a
// quorum's clocks since it started stamps at once. One that has not (it
// has just started, or it leads no metadata term, whose start asks for a
// reading, and its own reading is yet to come) waits for a reading first,
// as a metadata term does: its log time would otherwise count from the
// epoch (a new cluster's group: the group's TTLs would run out in 1970,
// and its log clock would leap 56 years at the first reading, timing out
// every consumer of the group at once), or from the group's last stamp
// (a cluster back from a long stop: the same leap, by as long as it was
// stopped). Without a reading within LeaderWait a group whose log has
// time, or a node whose metadata term set log time, goes on from there
// by the monotonic clock; a new group on a node without log time keeps
// waiting. It returns false when ctx ends first.
func (t *Time) StartGroupTerm(ctx context.Context, clock int64) bool {
	t.stamp.Floor(clock)
	if off, ok := t.q.lastAgreed(); ok {
		t.stamp.anchor(off)
	}
	if read, _ := t.stamp.setBy(); read {
		return true
	}
	t.q.askRound()
	// A node that has just started may not reach its peers yet: it asks
	// for rounds until one reads a quorum, not once a SampleInterval.
	again := time.NewTicker(groupTermRetry)
	defer again.Stop()
	giveUp := time.NewTimer(t.cfg.LeaderWait)
	defer giveUp.Stop()
	for {
		wait := t.q.rounds.Wait()
		if read, _ := t.stamp.setBy(); read {
			return true
		}
		select {
		case <-wait:
		case <-again.C:
			t.q.askRound()
		case <-giveUp.C:
			if _, logTime := t.stamp.setBy(); logTime {
				t.cfg.Logger.Warn("no quorum of clocks read: a queue group's log time goes on from its log's by this node's monotonic clock")
				return true
			}
			t.cfg.Logger.Warn("no quorum of clocks read: a new queue group's leader waits for one before it stamps")
		case <-ctx.Done():
			return false
		}
	}
}
