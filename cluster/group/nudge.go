package group

import (
	"time"

	"github.com/hashicorp/raft"
)

// Telling followers of a commit without polling.
//
// A follower applies an entry once an append tells it the leader
// committed it, and hashicorp/raft's leader sends the commit index only
// with its next append: the next entries, or an empty append every commit
// timeout to each follower. With a commit timeout of 2 ms that was 500
// appends a second to each follower of every group, idle or not: 15 % of
// a core on an idle leader, 5 % on each follower. Its commit timeout
// cannot be changed while raft runs, so it is now long (a safety net), and
// the leader tells its followers of a burst's last commit itself: once
// its state machine applied everything its log holds and nothing newer
// came for nudgeQuiet, it appends a barrier (an entry raft keeps out of
// the state machine), whose append carries the commit index. An idle
// group costs nothing; a burst costs one entry at its end.

// nudgeQuiet is how long the leader waits, once it applied its whole log,
// for more entries before it appends the barrier: entries that come within
// it carry the commit index themselves.
const nudgeQuiet = 2 * time.Millisecond

// DefaultCommitTimeout is raft's commit timeout for a group that is told
// of commits by the nudge: hashicorp/raft's own default.
const DefaultCommitTimeout = 50 * time.Millisecond

// runNudge appends a barrier after each burst the leader applied, until
// closing closes.
func (g *Group) runNudge(closing <-chan struct{}) {
	var told uint64 // the applied index the last barrier followed
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	for {
		applied, next := g.applied.Load()
		select {
		case <-next:
			continue
		case <-closing:
			return
		default:
		}
		r := g.Raft()
		if applied > told && r != nil && r.State() == raft.Leader && r.LastIndex() == applied {
			// Quiet for nudgeQuiet, or more entries came.
			quiet.Reset(nudgeQuiet)
			select {
			case <-next:
				quiet.Stop()
				continue
			case <-quiet.C:
			case <-closing:
				return
			}
			if r.State() == raft.Leader && r.LastIndex() == applied {
				told = applied
				// Not waited for: its append is what matters.
				_ = r.Barrier(nudgeQuiet)
			}
		}
		select {
		case <-next:
		case <-closing:
			return
		}
	}
}
