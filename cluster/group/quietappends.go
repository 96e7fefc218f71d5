package group

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// A leader's raft sends each follower an append without entries every
// CommitTimeout, so that a follower learns the commit index soon after
// the last entries of a burst (hashicorp/raft#282). raftmq's commit
// timeout is 2 ms, because a consumer on a follower waits for that
// follower's apply; so a group that is idle still costs its leader 500
// round trips a second to each follower, each with its msgpack and TLS
// records and a turn of the follower's raft loop, and a node pays that
// for every group it leads.
//
// Past the first, those appends say nothing new: the same term, the same
// previous entry, the same commit index, which the follower has already
// taken. QuietAppends answers such a repeat with the follower's answer to
// the last one sent, as long as the follower has answered the leader (that
// append, or a heartbeat since, in the same term) within a window; when it
// has not, the append goes. An append that differs in anything (entries,
// a commit index that moved, a new term) always goes, as do heartbeats
// (they carry no commit index), so raft sees the traffic of a busy group
// unchanged, and an idle group's followers hear only heartbeats.
//
// The answer is given when the hold ends (HeartbeatTimeout, five
// windows), or as soon as the log grows (Wake), the leader applies an
// entry (its commit index moved, and the next append carries it), or the
// group shuts down (Close), not at once: raft's replication loop would
// otherwise be back every commit timeout, and the wake-ups of its
// goroutines, one per follower of every group a node leads, cost about
// what the appends did. It is given only if the follower is still fresh
// then (it answered an append or a heartbeat sent within the window);
// else the append goes. Raft's heartbeats, every HeartbeatTimeout/10,
// keep a live follower fresh, so an idle group's replication goroutine
// wakes once a hold; when it woke at the end of every window, those
// wake-ups were a fifth of an idle node's CPU samples. A log that grows
// and a commit index that moves are all raft's loop waits for, so no
// entry and no commit waits on this; what does wait, at most the hold,
// is the end of replication to a follower that left the configuration
// or to every follower of a leader that stepped down (they send nothing
// meanwhile), and followers' news of a commit no command was applied at
// (a barrier, a configuration; both grow the log, so the group is busy
// again). A leadership transfer wakes the waits first
// (Group.TransferLeadership).
//
// A group whose log grew within the last quietAfter is not idle, and its
// appends all go, as raft sends them: measured at 50 messages a second,
// answering the repeats between two messages cost every delivery about
// a millisecond (each node's runtime, no longer woken every few ms, was
// asleep when the next message came) for a third less CPU. What this is
// for is the group that has nothing to do.
//
// An answer given for the follower can never commit anything: raft
// counts a follower's match index only from the entries an append
// carried (updateLastAppended), and these carry none. The follower keeps
// what an append told it until it restarts, and a
// restart breaks the leader's connection, so the heartbeat or append
// that meets it fails; a failure, a refusal or a newer term forgets the
// follower's answer, so nothing is answered for a follower that did not
// answer last. What an answered repeat does cost is freshness: a leader
// cut off from a follower (a partition, a freeze: its RPCs hang rather
// than fail) counts the follower as heard from up to the window longer
// than its heartbeats alone would, in its lease check and VerifyLeader.
// The window is the longest gap raft leaves between two heartbeats
// (HeartbeatTimeout/5), so the leader's lease runs out at most that much
// later.
//
// A group's idle heartbeats are answered the same way
// (AnswerHeartbeats): one that finds the follower fresh is answered with
// its answer to the last heartbeat, so a live follower of an idle group
// is sent one about every other time raft sends one, every 100 to 200 ms
// instead of 50 to 100 with raftmq's 500 ms heartbeat timeout, well
// within the timeout after which it stands. The metadata group's too:
// its leader's count of whom it reaches (membership.Reach) hears only
// the RPCs that go, so a server is unreached only after a silence longer
// than the longest gap between two of them, twice the window
// (membership.UnreachedAfter).
type QuietAppends struct {
	window  time.Duration
	hold    time.Duration // how long an answer waits at most
	after   time.Duration // quietAfter, or what a test sets
	now     func() time.Time
	applied func() (uint64, <-chan struct{}) // the leader's applied index (Applied)

	beats bool // heartbeats are answered too (AnswerHeartbeats)

	mu    sync.Mutex
	last  map[raft.ServerID]quietAnswer
	beat  map[raft.ServerID]quietAnswer // the answer to the last heartbeat (no key)
	grew  time.Time                     // the last Wake
	woken chan struct{}                 // closed by the next Wake, once someone waits on it
	wait  bool                          // someone took woken
	done  chan struct{}                 // closed by Close
	// failed holds the term of each follower whose last append or
	// heartbeat failed (no answer at all), until one is answered.
	failed map[raft.ServerID]uint64

	sent, answered atomic.Uint64
	beatsAnswered  atomic.Uint64 // the heartbeats among answered
}

// quietAnswer is the follower's answer to the last idle append sent it.
type quietAnswer struct {
	key  quietKey
	resp raft.AppendEntriesResponse
	at   time.Time // when the last append or heartbeat it answered was sent
}

// quietKey is what an idle append says.
type quietKey struct {
	term, prev, prevTerm, commit uint64
}

// quietAfter is how long a group's log stands still before its repeated
// appends are answered.
const quietAfter = time.Second

// quietHolds is the hold in windows: raft's heartbeat timeout, when the
// window is a fifth of it.
const quietHolds = 5

// NewQuietAppends answers repeated idle appends for window after the
// last one sent (0 sends every append).
func NewQuietAppends(window time.Duration) *QuietAppends {
	return &QuietAppends{window: window, hold: quietHolds * window, after: quietAfter, now: time.Now, last: map[raft.ServerID]quietAnswer{},
		beat: map[raft.ServerID]quietAnswer{}, failed: map[raft.ServerID]uint64{}, woken: make(chan struct{}), done: make(chan struct{})}
}

// AnswerHeartbeats has heartbeats to a fresh follower of an idle group
// answered too. Before raft starts.
func (q *QuietAppends) AnswerHeartbeats() { q.beats = true }

// Applied has answers also end their wait when the leader applies an
// entry: f is the applied index and a channel closed at its next advance.
// Before raft starts.
func (q *QuietAppends) Applied(f func() (uint64, <-chan struct{})) { q.applied = f }

// Wake ends the waits of the answers being given: the log grew.
func (q *QuietAppends) Wake() {
	q.mu.Lock()
	q.grew = q.now()
	if q.wait {
		close(q.woken)
		q.woken, q.wait = make(chan struct{}), false
	}
	q.mu.Unlock()
}

// Close ends every wait, now and later: the group is shutting down.
func (q *QuietAppends) Close() {
	if q == nil {
		return
	}
	q.mu.Lock()
	select {
	case <-q.done:
	default:
		close(q.done)
	}
	q.mu.Unlock()
}

// idleKey is the key of an append that may be answered without sending
// it: no entries, and a commit index (heartbeats carry none).
func idleKey(a *raft.AppendEntriesRequest) (quietKey, bool) {
	if len(a.Entries) > 0 || a.LeaderCommitIndex == 0 {
		return quietKey{}, false
	}
	return quietKey{term: a.Term, prev: a.PrevLogEntry, prevTerm: a.PrevLogTerm, commit: a.LeaderCommitIndex}, true
}

// answer fills resp and reports true when the append to id need not go.
func (q *QuietAppends) answer(id raft.ServerID, a *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	if q == nil || q.window <= 0 {
		return false
	}
	if isHeartbeat(a) {
		return q.answerBeat(id, a, resp)
	}
	k, ok := idleKey(a)
	if !ok {
		return false
	}
	q.mu.Lock()
	now := q.now()
	last, ok := q.last[id]
	if !ok || last.key != k || now.Sub(last.at) >= q.window || now.Sub(q.grew) < q.after {
		q.mu.Unlock()
		return false
	}
	woken := q.woken
	q.wait = true
	q.mu.Unlock()
	wait := true
	var moved <-chan struct{}
	if q.applied != nil {
		idx, ch := q.applied()
		if idx > a.LeaderCommitIndex {
			// The commit index moved on since raft made this append;
			// its next one carries it.
			wait = false
		}
		moved = ch
	}
	if wait {
		t := time.NewTimer(q.hold)
		select {
		case <-t.C:
		case <-woken:
		case <-moved:
		case <-q.done:
		}
		t.Stop()
		// The follower must still be fresh: a heartbeat that failed
		// meanwhile took the answer back, and one that has not been
		// answered for a window leaves it stale.
		q.mu.Lock()
		cur, ok := q.last[id]
		now := q.now()
		q.mu.Unlock()
		if !ok || cur.key != k || now.Sub(cur.at) >= q.window {
			return false
		}
		last = cur
	}
	*resp = last.resp
	q.answered.Add(1)
	return true
}

// isHeartbeat reports whether a is one of raft's heartbeats: no entries
// and no commit index.
func isHeartbeat(a *raft.AppendEntriesRequest) bool {
	return len(a.Entries) == 0 && a.LeaderCommitIndex == 0
}

// answerBeat is answer for a heartbeat: given at once, when heartbeats
// are answered, the group is idle and the follower answered a heartbeat
// or an idle append of this term sent within the window.
func (q *QuietAppends) answerBeat(id raft.ServerID, a *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	if !q.beats {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	b, ok := q.beat[id]
	if !ok || b.resp.Term != a.Term || now.Sub(b.at) >= q.window || now.Sub(q.grew) < q.after {
		return false
	}
	*resp = b.resp
	q.answered.Add(1)
	q.beatsAnswered.Add(1)
	return true
}

// sentAt is the time to record an append sent now by.
func (q *QuietAppends) sentAt() time.Time {
	if q == nil {
		return time.Time{}
	}
	return q.now()
}

// record keeps the follower's answer to an append sent at at, or forgets
// the last one when this one failed or was not idle.
func (q *QuietAppends) record(id raft.ServerID, at time.Time, a *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, err error) {
	if q == nil {
		return
	}
	q.sent.Add(1)
	k, idle := idleKey(a)
	heartbeat := isHeartbeat(a)
	q.mu.Lock()
	defer q.mu.Unlock()
	if err != nil {
		q.failed[id] = a.Term
	} else {
		delete(q.failed, id)
	}
	switch {
	case idle && err == nil && resp.Success && resp.Term == a.Term:
		q.last[id] = quietAnswer{key: k, resp: *resp, at: at}
		heardAt(q.beat, id, a.Term, at)
	case heartbeat && err == nil && resp.Term == a.Term:
		// The follower is there, in the leader's term: the last idle
		// answer holds a window longer.
		heardAt(q.last, id, a.Term, at)
		if b, ok := q.beat[id]; !ok || at.After(b.at) {
			q.beat[id] = quietAnswer{resp: *resp, at: at}
		}
	case err == nil && resp.Success && resp.Term == a.Term:
		// Entries the follower took: the next idle append says
		// something new, and the follower was there.
		delete(q.last, id)
		heardAt(q.beat, id, a.Term, at)
	default:
		delete(q.last, id)
		delete(q.beat, id)
	}
}

// heardAt moves the time of the answer m holds for id, given in term, to
// at, if later. Under q.mu.
func heardAt(m map[raft.ServerID]quietAnswer, id raft.ServerID, term uint64, at time.Time) {
	if x, ok := m[id]; ok && x.resp.Term == term && at.After(x.at) {
		x.at = at
		m[id] = x
	}
}

// Reached reports whether the follower id answered a heartbeat or an
// append of term sent within the hold (a heartbeat timeout), with no
// failure since: a leader's freshest news that the follower is there,
// sooner than gossip's (a stopped follower refuses the next heartbeat,
// a tenth of the timeout later).
func (q *QuietAppends) Reached(id raft.ServerID, term uint64) bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	b, ok := q.beat[id]
	return ok && b.resp.Term == term && q.now().Sub(b.at) < q.hold
}

// Failed reports whether the last append or heartbeat sent to the
// follower id in term failed: a peer stopped, or one that refuses the
// connection. Unlike a follower not Reached, it is not one that this
// leader has not sent to yet.
func (q *QuietAppends) Failed(id raft.ServerID, term uint64) bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	t, ok := q.failed[id]
	return ok && t == term
}

// HeartbeatsAnswered reports how many of the answered appends were
// heartbeats.
func (q *QuietAppends) HeartbeatsAnswered() uint64 {
	if q == nil {
		return 0
	}
	return q.beatsAnswered.Load()
}

// Counts reports how many appends were sent and how many were answered
// without sending.
func (q *QuietAppends) Counts() (sent, answered uint64) {
	if q == nil {
		return 0, 0
	}
	return q.sent.Load(), q.answered.Load()
}
