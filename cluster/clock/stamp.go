package clock

import (
	"sync"
	"time"
)

// slewDiv sets how fast log time closes a small lead over the quorum's
// clocks: it runs at (1 - 1/slewDiv) of the real rate until it meets them,
// so it never stands still.
const slewDiv = 10

// quorumTime says what the quorum's wall clocks read, as an offset from
// this node's monotonic clock (unix ns minus monotonic ns): quorumClock.
type quorumTime interface {
	estimate() clockEstimate
}

// Stamper hands out the leader's stamps (unix ms). It is the only place
// that reads time for the log. Log time advances by the leader's monotonic
// clock from where the log left it (reset, at the start of a term) and is
// anchored to the quorum's wall clocks (quorum.go), never to this
// node's alone:
//
//   - the quorum's clocks ahead of log time: log time jumps to them (an
//     idle log after a failover, a leader whose clock ran slow);
//   - log time ahead by at most the slew window (drift of the leader's
//     oscillator, sampling noise): it runs at 90% of the real rate until
//     it meets them;
//   - log time ahead by more (the quorum's clocks stepped back together,
//     or an earlier release's leader pushed it): it runs at the real rate,
//     as the monotonic clock says; it neither waits for the clocks nor
//     slows for an hour.
//
// Stamps never go back: a stamp is at least the last one.
type Stamper struct {
	clock  Clock
	quorum quorumTime // nil: the monotonic clock alone
	window int64      // the slew window, ns

	mu     sync.Mutex
	last   int64         // the last stamp handed out, ms
	lt     int64         // log time at ltMono, unix ns
	ltMono time.Duration // the monotonic reading lt was taken at
	// read: a reading of a quorum's clocks set log time; logTime: a log
	// that has time did (a term's reset, a group's Floor). Until one of
	// them, log time counts from the epoch, which no entry may be
	// stamped with (StartGroupTerm).
	read, logTime bool
}

func newStamper(clock Clock, q quorumTime, window time.Duration) *Stamper {
	return &Stamper{clock: clock, quorum: q, window: int64(window), ltMono: clock.Monotonic()}
}

// advance moves log time to the present and returns it (unix ns).
// Locks: s.mu held.
func (s *Stamper) advance() int64 {
	m := s.clock.Monotonic()
	el := max(int64(m-s.ltMono), 0)
	lt := s.lt + el
	if s.quorum != nil {
		if e := s.quorum.estimate(); e.ok {
			qt := int64(m) + e.offset
			s.read = true
			switch {
			case qt >= lt:
				lt = qt
			case lt-qt <= s.window:
				lt = max(qt, s.lt+el-el/slewDiv)
			}
		}
	}
	s.lt, s.ltMono = lt, m
	return lt
}

// Next returns the stamp for the next log entry.
func (s *Stamper) Next() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = max(s.last, s.advance()/int64(time.Millisecond))
	return s.last
}

// Peek returns what Next would return now, without consuming it.
func (s *Stamper) Peek() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.last, s.advance()/int64(time.Millisecond))
}

// reset starts log time of a new term at the log's clock (the latest
// stamp any earlier leader wrote): it continues from there by the
// monotonic clock until the quorum's clocks say more.
func (s *Stamper) reset(clockMs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = clockMs
	s.lt = clockMs * int64(time.Millisecond)
	s.ltMono = s.clock.Monotonic()
	s.logTime = s.logTime || clockMs > 0
}

// Floor raises log time to clockMs if it is behind: a queue group's
// leader stamps from the node's one stamper, which must not stamp below
// what that group's log already holds (another node's stamps), nor move
// the other groups' log time back as reset would.
func (s *Stamper) Floor(clockMs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	s.last = max(s.last, clockMs)
	s.lt = max(s.lt, clockMs*int64(time.Millisecond))
	s.logTime = s.logTime || clockMs > 0
}

// setBy reports whether a reading of a quorum's clocks (read) or a log
// with time (logTime) ever set log time.
func (s *Stamper) setBy() (read, logTime bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	return s.read, s.logTime
}

// offset is log time now minus the monotonic clock (unix ns minus
// monotonic ns), comparable with the quorum's clockEstimate.
func (s *Stamper) offset() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	lt := s.advance()
	return lt - int64(s.ltMono)
}

// anchor moves log time forward to what the clocks of a quorum read, given
// as an offset from the monotonic clock, if that is later.
func (s *Stamper) anchor(offset int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	s.lt = max(s.lt, int64(s.ltMono)+offset)
	s.read = true
}
