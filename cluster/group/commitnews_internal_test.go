package group

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// newsRig is a CommitNews whose applied and last indexes the test sets
// and whose sends it answers and records.
type newsRig struct {
	c                   *CommitNews
	mu                  sync.Mutex
	applied, last, term uint64
	answer              func(a *raft.AppendEntriesRequest, r *raft.AppendEntriesResponse) error
	sent                chan *raft.AppendEntriesRequest
}

func newNewsRig() *newsRig {
	g := &newsRig{sent: make(chan *raft.AppendEntriesRequest, 16), term: 3}
	g.answer = func(a *raft.AppendEntriesRequest, r *raft.AppendEntriesResponse) error {
		r.Term, r.Success = a.Term, true
		return nil
	}
	g.c = NewCommitNews(func() (uint64, <-chan struct{}) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.applied, nil
	}, func() (uint64, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.last, nil
	}, func() uint64 {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.term
	})
	g.c.send = func(_ raft.ServerID, _ raft.ServerAddress, a *raft.AppendEntriesRequest, r *raft.AppendEntriesResponse) error {
		err := g.answer(a, r)
		g.sent <- a
		return err
	}
	return g
}

func (g *newsRig) at(applied, last uint64) {
	g.mu.Lock()
	g.applied, g.last = applied, last
	g.mu.Unlock()
	g.c.tell(applied)
}

// next is the next news sent; it fails the test after a while without.
func (g *newsRig) next(t *testing.T) *raft.AppendEntriesRequest {
	t.Helper()
	select {
	case a := <-g.sent:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no news sent")
		return nil
	}
}

// none checks that nothing was sent: tell starts its sends before it
// returns, so one would be on its way.
func (g *newsRig) none(t *testing.T) {
	t.Helper()
	g.c.mu.Lock()
	defer g.c.mu.Unlock()
	for id, p := range g.c.peers {
		if p.sending {
			t.Fatalf("news on its way to %s", id)
		}
	}
	select {
	case a := <-g.sent:
		t.Fatalf("news sent: %+v", a)
	default:
	}
}

// waitIdle waits for the sends on their way to be answered.
func (g *newsRig) waitIdle() { g.c.inflight.Wait() }

// expect takes the next news, checks its previous entry and commit index,
// and waits for its answer.
func (g *newsRig) expect(t *testing.T, prev, commit uint64) *raft.AppendEntriesRequest {
	t.Helper()
	n := g.next(t)
	if n.PrevLogEntry != prev || n.LeaderCommitIndex != commit {
		t.Fatalf("news %+v: want previous entry %d, commit %d", n, prev, commit)
	}
	g.waitIdle()
	return n
}

func appendOf(term, prev, prevTerm, commit uint64, entries ...uint64) *raft.AppendEntriesRequest {
	a := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("n1")}, Term: term, PrevLogEntry: prev, PrevLogTerm: prevTerm, LeaderCommitIndex: commit}
	for _, i := range entries {
		a.Entries = append(a.Entries, &raft.Log{Index: i, Term: term})
	}
	return a
}

func took(a *raft.AppendEntriesRequest) *raft.AppendEntriesResponse {
	return &raft.AppendEntriesResponse{Term: a.Term, Success: true}
}

func TestCommitNews_TellsWhatRaftWouldAndNoMore(t *testing.T) {
	g := newNewsRig()
	// A heartbeat says nothing of what the follower holds.
	hb := &raft.AppendEntriesRequest{Term: 3}
	g.c.record("f", "addr", hb, took(hb), nil)
	g.at(9, 9)
	g.none(t)

	a := appendOf(3, 10, 2, 9, 11, 12)
	g.c.record("f", "addr", a, took(a), nil)
	// More in the log than applied: raft's next append carries it.
	g.at(12, 13)
	g.none(t)
	g.at(12, 12)
	if n := g.expect(t, 12, 12); n.Term != 3 || n.PrevLogTerm != 3 || len(n.Entries) != 0 || string(n.ID) != "n1" {
		t.Fatalf("news %+v: want term 3, previous entry of term 3, no entries, the leader's header", n)
	}
	// Told already.
	g.at(12, 12)
	g.none(t)
	// Applied past what the follower took: no further than its last
	// entry, which it was told.
	g.at(15, 15)
	g.none(t)
	a = appendOf(3, 12, 3, 12, 13, 14)
	g.c.record("f", "addr", a, took(a), nil)
	g.at(15, 15)
	g.expect(t, 14, 14) // the follower's last entry
	if got := g.c.Told(); got != 2 {
		t.Fatalf("told %d, want 2", got)
	}
}

func TestCommitNews_ForgetsAFollowerThatDidNotTakeIt(t *testing.T) {
	for name, c := range map[string]struct {
		answer func(a *raft.AppendEntriesRequest, r *raft.AppendEntriesResponse) error
	}{
		"failed": {func(*raft.AppendEntriesRequest, *raft.AppendEntriesResponse) error { return errors.New("broken pipe") }},
		"refused": {func(a *raft.AppendEntriesRequest, r *raft.AppendEntriesResponse) error {
			r.Term = a.Term
			return nil
		}},
		"newer term": {func(a *raft.AppendEntriesRequest, r *raft.AppendEntriesResponse) error {
			r.Term, r.Success = a.Term+1, true
			return nil
		}},
	} {
		t.Run(name, func(t *testing.T) {
			g := newNewsRig()
			g.answer = c.answer
			a := appendOf(3, 10, 2, 9, 11)
			g.c.record("f", "addr", a, took(a), nil)
			g.at(11, 11)
			g.next(t)
			g.waitIdle()
			if got := g.c.Told(); got != 0 {
				t.Fatalf("told %d, want 0", got)
			}
			if len(g.c.peers) != 0 {
				t.Fatal("the follower is still remembered")
			}
		})
	}
	// raft's own append that the follower did not take forgets it too.
	g := newNewsRig()
	a := appendOf(3, 10, 2, 9, 11)
	g.c.record("f", "addr", a, took(a), nil)
	b := appendOf(3, 11, 3, 9, 12)
	g.c.record("f", "addr", b, &raft.AppendEntriesResponse{Term: 3}, nil)
	g.at(11, 11)
	g.none(t)
}

// A follower whose answer comes after the leader applied what it took
// (the others made the majority) is told at its answer: the news of the
// apply went before it held the entries.
func TestCommitNews_TellsTheFollowerThatAnsweredAfterTheApply(t *testing.T) {
	g := newNewsRig()
	a := appendOf(3, 10, 2, 10, 11)
	g.c.record("slow", "addr", a, took(a), nil)
	b := appendOf(3, 11, 3, 10, 12)
	g.at(12, 12)        // applied before the follower answered b
	g.expect(t, 11, 11) // all the follower holds
	g.c.record("slow", "addr", b, took(b), nil)
	g.expect(t, 12, 12)
	if got := g.c.Told(); got != 2 {
		t.Fatalf("told %d, want 2", got)
	}
}

// A node that led term 3 and follows term 4 applies the new leader's
// entries, which may differ at the same indexes from those it sent in
// term 3: a follower still in term 3 must not hear them as committed.
func TestCommitNews_NothingOfATermThisNodeNoLongerIsIn(t *testing.T) {
	g := newNewsRig()
	a := appendOf(3, 10, 2, 10, 11, 12)
	g.c.record("f", "addr", a, took(a), nil)
	g.mu.Lock()
	g.term = 4
	g.mu.Unlock()
	g.at(12, 12)
	g.none(t)
}
