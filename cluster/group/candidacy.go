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
//
// A node starved of CPU (or on a link slower than the lease) may not get
// its votes back within the short timeout: each candidacy then ends
// before its answers are counted and the next begins, and no candidate
// ever wins. So a raft that has been a candidate for shortCandidacies
// times the lease (at least half that many short candidacies failed)
// goes back to the configured timeouts for the rest of its candidacy;
// the next candidacy waits the configured election timeout for its
// votes. An election that succeeds within two short candidacies, as an
// election does when its votes come back in time, never reaches it.

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
	// read again, and while it is a candidate it is also read every
	// lease, lest a missed change leave the timeouts short, and to see
	// how long the candidacy has lasted.
	var recheck <-chan time.Time
	short := false
	var since time.Time // when the raft became a candidate; zero when it is none
	for {
		select {
		case <-closing:
			return
		case <-changes:
		case <-recheck:
		}
		candidate := r.State() == raft.Candidate
		switch {
		case !candidate:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		want := candidate && time.Since(since) < shortCandidacies*hb
		if want != short {
			if candidate && !want {
				g.cfg.Logger.Warn("no votes won within the short election timeouts: standing with the configured ones",
					"candidate_for", time.Since(since).Round(time.Millisecond), "election_timeout", g.cfg.Raft.ElectionTimeout)
			}
			g.reloadConfig(r, func(cur raft.ReloadableConfig) []raft.ReloadableConfig {
				if want {
					cur.HeartbeatTimeout, cur.ElectionTimeout = hb, election
				} else {
					cur.HeartbeatTimeout, cur.ElectionTimeout = g.cfg.Raft.HeartbeatTimeout, g.cfg.Raft.ElectionTimeout
				}
				return []raft.ReloadableConfig{cur}
			})
			short = want
		}
		recheck = nil
		if candidate {
			recheck = time.After(hb)
		}
	}
}

// shortCandidacies is how many leases a raft stands with the short
// timeouts before it goes back to the configured ones (above): each
// short candidacy lasts one to two leases, so at least three of them
// failed.
const shortCandidacies = 6

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
