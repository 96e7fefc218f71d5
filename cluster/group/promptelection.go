package group

import (
	"time"

	"github.com/hashicorp/raft"
)

// A follower's raft looks for its leader's silence only when a timer of
// its own fires: at a random moment between HeartbeatTimeout and twice it
// after the timer was armed, re-armed for as long again whenever it finds
// the leader heard from within HeartbeatTimeout. So a follower notices a
// leader gone silent between HeartbeatTimeout and about three times it
// after the last contact. And until it notices, it refuses every
// candidate's pre-vote ("we have a leader"): a candidate waits out its
// election timeout (ElectionTimeout to twice it) and asks again, and with
// five nodes the election waits for the third of four followers to
// notice. The fault suite measured 0.9 to 2.75 s before every group led
// again, with a 500 ms timeout, where a leader's death or cut-off also
// holds up the dead letters its queues owe.
//
// silenceWatch has a follower notice at HeartbeatTimeout after the last
// contact, plus a stagger: a timer armed for that moment, which, when it
// finds the leader silent that long, has raft's follower loop run its own
// check at once. The check, and everything after it (giving up the
// leader, the pre-vote, the vote), stay raft's; only when the check runs
// changes, to a moment raft's random timer could itself have picked.
//
// The stagger keeps the followers from standing at once. A follower that
// stands while the others still have their leader is refused, and waits
// out its election timeout; but it has no leader any more, so it grants
// the next one's pre-vote, and the follower that stands when a majority
// has no leader wins. Two that stand within a round trip of each other
// both pass the pre-vote and split the vote, and the election waits for
// a timeout (about one in six elections on three nodes under load with a
// random jitter of up to an eighth of the timeout). So the followers
// stand in an order all of them know: the voters of the configuration
// in a ring that starts after the silent leader, a sixteenth of the
// timeout apart. On three nodes the second follower is elected a
// sixteenth of the timeout after the first noticed; on five, the third,
// an eighth after. Starting after the leader spreads the winners over
// the members.

// raft has one way to have its follower loop check at once: a
// ReloadConfig that shortens HeartbeatTimeout notifies it to fire its
// timer now. The watch shortens it by a nanosecond and sets it back to
// what it was, both under the lock every reload of the group takes
// (reloadConfig), so no other reload reads the shortened value.

// silenceCheck is the watch's decision for a raft in state, last heard
// from its leader at last (zero: never since it started), at now, for a
// follower that is to stand once its leader was silent for wait: whether
// to have raft check for the leader's silence now, and how long until
// the watch looks again.
func silenceCheck(state raft.RaftState, last, now time.Time, wait time.Duration) (nudge bool, next time.Duration) {
	if state != raft.Follower {
		// A leader or a candidate has no leader to lose: the watch
		// looks again when raft's state changes (watchSilence), and
		// only every leaderRecheck waits without one.
		return false, leaderRecheck * wait
	}
	if last.IsZero() {
		// A follower that never heard from a leader (a start) is left
		// to raft's own timer, which also covers a cluster that is not
		// formed yet.
		return false, wait
	}
	silent := now.Sub(last)
	if silent < wait {
		return false, wait - silent
	}
	return true, wait
}

// standOrder is self's place among the followers that would stand if
// leader went silent: the voters of servers in a ring that starts after
// leader, leader left out. A server that is not a voter there stands
// last.
func standOrder(servers []raft.Server, self, leader raft.ServerID) int {
	var voters []raft.ServerID
	start := 0
	for _, s := range servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		if s.ID == leader {
			start = len(voters)
			continue
		}
		voters = append(voters, s.ID)
	}
	for i := range voters {
		if voters[(start+i)%len(voters)] == self {
			return i
		}
	}
	return len(voters)
}

// standAfter is how long after its last contact a follower stands: the
// heartbeat timeout, then a sixteenth of it per follower before it in
// standOrder.
func standAfter(r *raft.Raft, self raft.ServerID, hb time.Duration) time.Duration {
	_, leader := r.LeaderWithID()
	f := r.GetConfiguration()
	if f.Error() != nil {
		return hb
	}
	return hb + time.Duration(standOrder(f.Configuration().Servers, self, leader))*(hb/16)
}

// watchSilence runs the silence watch of r, the group's raft, until
// closing closes.
func (g *Group) watchSilence(r *raft.Raft, closing <-chan struct{}) {
	hb := g.cfg.Raft.HeartbeatTimeout
	if hb <= 0 {
		return
	}
	self := raft.ServerID(g.cfg.ID)
	changes, stop := Observe[raft.RaftState](r, 16)
	defer stop()
	t := time.NewTimer(standAfter(r, self, hb))
	defer t.Stop()
	for {
		select {
		case <-closing:
			return
		case <-t.C:
		case <-changes:
			t.Stop()
		}
		g.silenceChecks.Add(1)
		nudge, next := silenceCheck(r.State(), r.LastContact(), time.Now(), standAfter(r, self, hb))
		if nudge {
			g.checkLeaderNow(r)
		}
		t.Reset(next)
	}
}

// leaderRecheck is how many heartbeat timeouts the watch of a leader or a
// candidate waits for a change of raft's state before it looks again. An
// idle node pays for every moment it wakes (docs/performance.md, "Half of
// an idle node's context switches are the runtime's sysmon"); a leader's
// watch, woken every heartbeat timeout, found nothing to watch each
// time. The observer drops a change only when sixteen wait unread, and
// a follower whose watch missed its change is still found silent by
// raft's own timer, later; the recheck bounds how long it is left to it.
const leaderRecheck = 8

// checkLeaderNow has raft's follower loop check for its leader's
// silence at once (see above).
func (g *Group) checkLeaderNow(r *raft.Raft) {
	g.reloadConfig(r, func(cur raft.ReloadableConfig) []raft.ReloadableConfig {
		if cur.HeartbeatTimeout != g.cfg.Raft.HeartbeatTimeout {
			// A candidacy's timeouts (candidacy.go), set back as
			// the watch sees raft a follower again.
			return nil
		}
		shorter := cur
		shorter.HeartbeatTimeout -= time.Nanosecond
		return []raft.ReloadableConfig{shorter, cur}
	})
}

// reloadConfig has raft take the reloadable settings steps returns for
// the current ones, in turn, one caller at a time: each step writes all
// of them back.
func (g *Group) reloadConfig(r *raft.Raft, steps func(cur raft.ReloadableConfig) []raft.ReloadableConfig) {
	g.reload.Lock()
	defer g.reload.Unlock()
	for _, s := range steps(r.ReloadableConfig()) {
		if err := r.ReloadConfig(s); err != nil {
			g.cfg.Logger.Warn("raft settings", "err", err)
			return
		}
	}
}
