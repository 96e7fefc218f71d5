package group

import (
	"time"

	"github.com/hashicorp/raft"
)

// A candidate whose pre-vote a majority refused asks again only when its
// election timer fires: a random moment between ElectionTimeout and twice
// it after it stood (hashicorp/raft's candidate loop takes no other
// nudge). With the stagger of the silence watch (promptelection.go) the
// first follower to stand is refused by design, by followers that still
// have their leader, and the one after it wins. When that one cannot win
// (its log is shorter than the first's, which refuses it), the election
// waits for the first's timer: the fault suite saw a group of three lead
// again only 925 ms after its first pre-vote, with a 500 ms timeout, and
// the dead letters its queues owed ran 2.2 s late.
//
// raft re-arms a candidate's timer when a reload shortens
// HeartbeatTimeout and changes ElectionTimeout. So while the group's raft
// is a candidate both are its LeaderLeaseTimeout, the least raft's own
// checks allow (the lease may not exceed the heartbeat timeout, nor it
// the election timeout), and it asks again between that and twice it;
// once it is no longer a candidate they are set back. A candidate has no
// leader to hear from and sends no heartbeats, so neither setting is in
// use meanwhile; a follower that arms its timer with the shorter one
// before they are set back still compares its leader's silence with
// what is set when the timer fires.

// candidateTimeouts is what a group's raft uses as its heartbeat and
// election timeouts while it is a candidate, given its configured ones
// (t): LeaderLeaseTimeout, or the configured ones when that would not
// shorten the election timeout.
func candidateTimeouts(t RaftTimings) (hb, election time.Duration) {
	if t.LeaderLeaseTimeout <= 0 || t.LeaderLeaseTimeout >= t.ElectionTimeout || t.LeaderLeaseTimeout > t.HeartbeatTimeout {
		return t.HeartbeatTimeout, t.ElectionTimeout
	}
	return t.LeaderLeaseTimeout, t.LeaderLeaseTimeout
}

// watchCandidacy sets r's timeouts for its candidacies (above) until
// closing closes.
func (g *Group) watchCandidacy(r *raft.Raft, closing <-chan struct{}) {
	hb, election := candidateTimeouts(g.cfg.Raft)
	if election == g.cfg.Raft.ElectionTimeout {
		return
	}
	changes, stop := Observe[raft.RaftState](r, 16)
	defer stop()
	// The observer drops what its channel cannot take, so the state is
	// read again, and while the timeouts are short it is also read every
	// lease, lest a missed change leave them short.
	var recheck <-chan time.Time
	short := false
	for {
		select {
		case <-closing:
			return
		case <-changes:
		case <-recheck:
		}
		candidate := r.State() == raft.Candidate
		if candidate != short {
			g.reloadConfig(r, func(cur raft.ReloadableConfig) []raft.ReloadableConfig {
				if candidate {
					cur.HeartbeatTimeout, cur.ElectionTimeout = hb, election
				} else {
					cur.HeartbeatTimeout, cur.ElectionTimeout = g.cfg.Raft.HeartbeatTimeout, g.cfg.Raft.ElectionTimeout
				}
				return []raft.ReloadableConfig{cur}
			})
			short = candidate
		}
		recheck = nil
		if short {
			recheck = time.After(hb)
		}
	}
}

// Observe registers an observer of r's observations whose Data is a T,
// on a channel of n that drops what it cannot take (raft does not wait
// for its observers); stop deregisters it.
func Observe[T any](r *raft.Raft, n int) (obs <-chan raft.Observation, stop func()) {
	ch := make(chan raft.Observation, n)
	o := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(T)
		return ok
	})
	r.RegisterObserver(o)
	return ch, func() { r.DeregisterObserver(o) }
}
