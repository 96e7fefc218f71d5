package cluster

import "sync"

// stamper hands out the leader's stamps (unix ms). It is the only place that
// reads the clock for the log: stamp = max(last stamp, now), so log time
// never goes backwards, and raise lifts the floor to the state machine's
// clock when a node becomes leader, so a leader whose clock is behind its
// predecessor's keeps time moving forward.
type stamper struct {
	clock Clock
	mu    sync.Mutex
	last  int64
}

// next returns the stamp for the next log entry.
func (s *stamper) next() int64 {
	now := s.clock.Now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now > s.last {
		s.last = now
	}
	return s.last
}

// peek returns what next would return now, without consuming it.
func (s *stamper) peek() int64 {
	now := s.clock.Now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(now, s.last)
}

// raise makes every later stamp at least floor.
func (s *stamper) raise(floor int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if floor > s.last {
		s.last = floor
	}
}
