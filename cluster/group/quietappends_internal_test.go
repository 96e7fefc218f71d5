package group

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// quietClock is a clock the test moves.
type quietClock struct{ t time.Time }

func (c *quietClock) now() time.Time { return c.t }

// newQuiet is QuietAppends on a clock the test moves, closed so that its
// answers do not wait: what these tests look at is what it answers.
func newQuiet(window time.Duration) (*QuietAppends, *quietClock) {
	c := &quietClock{t: time.Unix(1_000_000, 0)}
	q := NewQuietAppends(window)
	q.now = c.now
	q.Close()
	return q, c
}

// idle is an append without entries carrying commit index commit.
func idle(term, prev, commit uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{Term: term, PrevLogEntry: prev, PrevLogTerm: term, LeaderCommitIndex: commit}
}

// sendTo plays one append through q as NoPipeline.Append does, with
// follower answering the ones that go; it reports whether it went.
func sendTo(q *QuietAppends, id raft.ServerID, a *raft.AppendEntriesRequest, follower func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error)) (raft.AppendEntriesResponse, bool, error) {
	var resp raft.AppendEntriesResponse
	if q.answer(id, a, &resp) {
		return resp, false, nil
	}
	at := q.sentAt()
	r, err := follower(a)
	resp = r
	q.record(id, at, a, &resp, err)
	return resp, true, err
}

func accepts(a *raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
	return raft.AppendEntriesResponse{Term: a.Term, LastLog: a.PrevLogEntry + uint64(len(a.Entries)), Success: true}, nil
}

func TestQuietAppends_ARepeatWithinTheWindowIsAnsweredAndOneGoesAfterIt(t *testing.T) {
	q, c := newQuiet(50 * time.Millisecond)
	if _, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts); !sent {
		t.Fatal("the first idle append was not sent")
	}
	for i := 0; i < 24; i++ {
		c.t = c.t.Add(2 * time.Millisecond)
		resp, sent, err := sendTo(q, "f1", idle(3, 100, 100), accepts)
		if sent || err != nil || !resp.Success || resp.LastLog != 100 || resp.Term != 3 {
			t.Fatalf("repeat %d at %v: sent %v, %+v, %v; want the last answer", i, 2*(i+1), sent, resp, err)
		}
	}
	c.t = c.t.Add(2 * time.Millisecond) // 50 ms after the one sent
	if _, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts); !sent {
		t.Fatal("a repeat a whole window after the last one sent was answered, not sent")
	}
	if s, a := q.Counts(); s != 2 || a != 24 {
		t.Fatalf("counts sent %d answered %d, want 2 and 24", s, a)
	}
}

func TestQuietAppends_WhatSaysSomethingNewAlwaysGoes(t *testing.T) {
	heartbeat := &raft.AppendEntriesRequest{Term: 3}
	withEntries := idle(3, 100, 100)
	withEntries.Entries = []*raft.Log{{Index: 101, Term: 3}}
	for name, a := range map[string]*raft.AppendEntriesRequest{
		"a moved commit index": idle(3, 100, 101),
		"a new previous entry": idle(3, 101, 100),
		"a new term":           idle(4, 100, 100),
		"entries":              withEntries,
		"a heartbeat":          heartbeat,
		"another follower":     nil,
	} {
		t.Run(name, func(t *testing.T) {
			q, c := newQuiet(50 * time.Millisecond)
			sendTo(q, "f1", idle(3, 100, 100), accepts)
			c.t = c.t.Add(time.Millisecond)
			id := raft.ServerID("f1")
			if a == nil {
				a, id = idle(3, 100, 100), "f2"
			}
			if _, sent, _ := sendTo(q, id, a, accepts); !sent {
				t.Fatalf("%+v was answered from the last answer", a)
			}
		})
	}
}

func TestQuietAppends_NothingIsAnsweredForAFollowerThatDidNotAnswerLast(t *testing.T) {
	down := errors.New("connection refused")
	for name, last := range map[string]func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error){
		"failed": func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
			return raft.AppendEntriesResponse{}, down
		},
		"refused": func(a *raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
			return raft.AppendEntriesResponse{Term: a.Term, LastLog: 90}, nil
		},
		"newer term": func(a *raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
			return raft.AppendEntriesResponse{Term: a.Term + 1, Success: true}, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			q, c := newQuiet(50 * time.Millisecond)
			sendTo(q, "f1", idle(3, 100, 100), accepts)
			c.t = c.t.Add(time.Millisecond)
			// The follower's answer to a heartbeat, or to the idle append
			// itself once it goes again, is what changed.
			q.now = func() time.Time { return c.t.Add(50 * time.Millisecond) }
			sendTo(q, "f1", idle(3, 100, 100), last)
			q.now = c.now
			if _, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts); !sent {
				t.Fatal("an append was answered from before the follower's last answer")
			}
		})
	}
	t.Run("a heartbeat answered", func(t *testing.T) {
		q, c := newQuiet(50 * time.Millisecond)
		sendTo(q, "f1", idle(3, 100, 100), accepts)
		// Heartbeats answered every 40 ms keep the answer good past
		// the window of the append that was sent.
		for i := 0; i < 10; i++ {
			c.t = c.t.Add(40 * time.Millisecond)
			sendTo(q, "f1", &raft.AppendEntriesRequest{Term: 3}, accepts)
			if _, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts); sent {
				t.Fatalf("after %v of answered heartbeats a repeat went", time.Duration(i+1)*40*time.Millisecond)
			}
		}
		c.t = c.t.Add(50 * time.Millisecond)
		if _, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts); !sent {
			t.Fatal("a window after the last heartbeat answered, a repeat was answered")
		}
	})
	for name, hb := range map[string]func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error){
		"a heartbeat failed": func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
			return raft.AppendEntriesResponse{}, down
		},
		"a heartbeat answered in a newer term": func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
			return raft.AppendEntriesResponse{Term: 4}, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			q, c := newQuiet(50 * time.Millisecond)
			sendTo(q, "f1", idle(3, 100, 100), accepts)
			c.t = c.t.Add(time.Millisecond)
			sendTo(q, "f1", &raft.AppendEntriesRequest{Term: 3}, hb)
			if _, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts); !sent {
				t.Fatal("an append was answered after the follower's last answer to a heartbeat")
			}
		})
	}
}

func TestQuietAppends_NoWindowSendsEverything(t *testing.T) {
	for _, q := range []*QuietAppends{nil, NewQuietAppends(0)} {
		var resp raft.AppendEntriesResponse
		q.record("f1", q.sentAt(), idle(3, 100, 100), &raft.AppendEntriesResponse{Term: 3, Success: true}, nil)
		if q.answer("f1", idle(3, 100, 100), &resp) {
			t.Fatalf("%v answered a repeat", q)
		}
	}
}

// waiting reports whether an answer is waiting on q's next Wake.
func waiting(q *QuietAppends) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wait
}

func awaitWaiting(t *testing.T, q *QuietAppends) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !waiting(q) {
		if time.Now().After(deadline) {
			t.Fatal("no answer waits")
		}
		time.Sleep(time.Millisecond)
	}
}

// repeat plays an idle append to f1 through q in the background; what
// comes reports whether it went or was answered other than with the
// follower's last answer.
func repeat(q *QuietAppends) <-chan bool {
	got := make(chan bool, 1)
	go func() {
		resp, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts)
		got <- sent || !resp.Success
	}()
	return got
}

func TestQuietAppends_AnAnswerWaitsUntilTheLogGrowsTheGroupStopsOrTheHoldEnds(t *testing.T) {
	q := NewQuietAppends(time.Hour)
	q.after = 0 // the Wakes here do not make the group busy
	sendTo(q, "f1", idle(3, 100, 100), accepts)

	got := repeat(q)
	awaitWaiting(t, q)
	select {
	case <-got:
		t.Fatal("the repeat was answered while the log stood still")
	case <-time.After(20 * time.Millisecond):
	}
	q.Wake()
	if wrong := <-got; wrong {
		t.Fatal("the repeat was sent, or answered other than the follower's last answer")
	}

	got = repeat(q)
	awaitWaiting(t, q)
	q.Close()
	if wrong := <-got; wrong {
		t.Fatal("the repeat was sent at Close")
	}

	q = NewQuietAppends(time.Hour)
	q.after = 0
	sendTo(q, "f1", idle(3, 100, 100), accepts)
	got = repeat(q)
	awaitWaiting(t, q)
	sendTo(q, "f1", &raft.AppendEntriesRequest{Term: 3}, func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
		return raft.AppendEntriesResponse{}, errors.New("connection reset")
	})
	q.Wake()
	if sent := <-got; !sent {
		t.Fatal("a heartbeat failed while the repeat waited, and the repeat was answered")
	}

	// The hold ends by itself, and a follower still fresh then (the
	// clock here does not move) is answered.
	short := NewQuietAppends(time.Hour)
	short.hold = 20 * time.Millisecond
	sendTo(short, "f1", idle(3, 100, 100), accepts)
	start := time.Now()
	if _, sent, _ := sendTo(short, "f1", idle(3, 100, 100), accepts); sent {
		t.Fatal("the repeat to a fresh follower was sent at the end of the hold")
	}
	if waited := time.Since(start); waited < short.hold || waited > 10*time.Second {
		t.Fatalf("the answer waited %v with a hold of %v", waited, short.hold)
	}
}

func TestQuietAppends_AHeldAnswerIsGivenOnlyToAFollowerStillFresh(t *testing.T) {
	var mu sync.Mutex
	clock := time.Unix(1_000_000, 0)
	move := func(d time.Duration) {
		mu.Lock()
		clock = clock.Add(d)
		mu.Unlock()
	}
	q := NewQuietAppends(50 * time.Millisecond)
	q.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}
	q.hold = time.Hour // only Wake ends a hold here
	q.after = 0        // and it does not make the group busy
	sendTo(q, "f1", idle(3, 100, 100), accepts)

	// Heartbeats answered every 40 ms keep the follower fresh for ten
	// windows of the hold.
	got := repeat(q)
	awaitWaiting(t, q)
	for range 10 {
		move(40 * time.Millisecond)
		sendTo(q, "f1", &raft.AppendEntriesRequest{Term: 3}, accepts)
	}
	q.Wake()
	if wrong := <-got; wrong {
		t.Fatal("a follower that answered every heartbeat during the hold was sent the repeat")
	}

	// None answered for a window: when the hold ends the repeat goes.
	got = repeat(q)
	awaitWaiting(t, q)
	move(50 * time.Millisecond)
	q.Wake()
	if sent := <-got; !sent {
		t.Fatal("a follower that answered nothing for a window was answered for")
	}
}

func TestQuietAppends_AnAnswerWaitsNoLongerThanTheLeadersCommitStandsStill(t *testing.T) {
	applied := NewAppliedIndex()
	applied.Advance(100)
	q := NewQuietAppends(time.Hour)
	q.Applied(applied.Load)
	sendTo(q, "f1", idle(3, 100, 100), accepts)

	got := make(chan bool, 1)
	go func() {
		_, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts)
		got <- sent
	}()
	awaitWaiting(t, q)
	applied.Advance(101)
	if sent := <-got; sent {
		t.Fatal("the repeat was sent")
	}

	// Applied past the commit index the append carries: raft's next
	// append carries the new one, so this one is answered at once.
	done := make(chan bool, 1)
	go func() {
		_, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts)
		done <- sent
	}()
	select {
	case sent := <-done:
		if sent {
			t.Fatal("the repeat was sent")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an append whose commit index is behind the leader's applied index waited")
	}
}

func TestQuietAppends_AGroupWhoseLogGrewLatelyIsNotIdle(t *testing.T) {
	q, c := newQuiet(time.Hour)
	sendTo(q, "f1", idle(3, 100, 100), accepts)
	c.t = c.t.Add(time.Millisecond)
	q.Wake()
	grew := c.t
	for _, d := range []time.Duration{0, quietAfter / 2, quietAfter - time.Millisecond} {
		c.t = grew.Add(d)
		if _, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts); !sent {
			t.Fatalf("%v after the log grew a repeat was answered", d)
		}
	}
	c.t = grew.Add(quietAfter)
	if _, sent, _ := sendTo(q, "f1", idle(3, 100, 100), accepts); sent {
		t.Fatalf("%v after the log grew a repeat was sent", quietAfter)
	}
}

func TestQuietAppends_AQueueGroupsHeartbeatToAFreshFollowerIsAnswered(t *testing.T) {
	beat := func() *raft.AppendEntriesRequest { return &raft.AppendEntriesRequest{Term: 3} }
	start := func(window time.Duration) (*QuietAppends, *quietClock) {
		q, c := newQuiet(window)
		q.AnswerHeartbeats()
		if _, sent, _ := sendTo(q, "f1", beat(), accepts); !sent {
			t.Fatal("the first heartbeat was not sent")
		}
		return q, c
	}

	q, c := start(50 * time.Millisecond)
	for i := range 4 {
		c.t = c.t.Add(12 * time.Millisecond)
		resp, sent, err := sendTo(q, "f1", beat(), accepts)
		if sent || err != nil || !resp.Success || resp.Term != 3 {
			t.Fatalf("heartbeat %d, %v after the one answered: sent %v, %+v, %v", i, time.Duration(i+1)*12*time.Millisecond, sent, resp, err)
		}
	}
	c.t = c.t.Add(2 * time.Millisecond) // a window after the one sent
	if _, sent, _ := sendTo(q, "f1", beat(), accepts); !sent {
		t.Fatal("a heartbeat a whole window after the last one answered was not sent")
	}
	// An idle append the follower answered is news of it as well.
	c.t = c.t.Add(40 * time.Millisecond)
	sendTo(q, "f1", idle(3, 100, 100), accepts)
	c.t = c.t.Add(40 * time.Millisecond)
	if _, sent, _ := sendTo(q, "f1", beat(), accepts); sent {
		t.Fatal("a heartbeat 40 ms after an answered idle append was sent")
	}

	down := errors.New("connection reset")
	for name, tc := range map[string]struct {
		setup func(q *QuietAppends, c *quietClock)
		a     *raft.AppendEntriesRequest
	}{
		"the metadata group's": {setup: func(q *QuietAppends, _ *quietClock) { q.beats = false }, a: beat()},
		"in a newer term":      {a: &raft.AppendEntriesRequest{Term: 4}},
		"to another follower":  {setup: func(q *QuietAppends, _ *quietClock) { q.beat["f2"] = q.beat["f1"]; delete(q.beat, "f1") }, a: beat()},
		"after the log grew": {setup: func(q *QuietAppends, c *quietClock) {
			q.after = time.Second
			q.Wake()
		}, a: beat()},
		"after a heartbeat failed": {setup: func(q *QuietAppends, c *quietClock) {
			q.record("f1", c.t, beat(), &raft.AppendEntriesResponse{}, down)
		}, a: beat()},
		"after an append was refused": {setup: func(q *QuietAppends, c *quietClock) {
			q.record("f1", c.t, idle(3, 100, 100), &raft.AppendEntriesResponse{Term: 3}, nil)
		}, a: beat()},
		"after an answer in a newer term": {setup: func(q *QuietAppends, c *quietClock) {
			q.record("f1", c.t, beat(), &raft.AppendEntriesResponse{Term: 4, Success: true}, nil)
		}, a: beat()},
	} {
		t.Run(name, func(t *testing.T) {
			q, c := start(time.Hour)
			c.t = c.t.Add(time.Millisecond)
			if tc.setup != nil {
				tc.setup(q, c)
			}
			if _, sent, _ := sendTo(q, "f1", tc.a, accepts); !sent {
				t.Fatalf("%+v was answered", tc.a)
			}
		})
	}
}

// Reached is what a stopping leader picks its successor by: a follower
// that answered within a heartbeat timeout, in this term, and whose last
// heartbeat did not fail.
func TestQuietAppends_AFollowerIsReachedUntilAHeartbeatFailsOrAHoldPasses(t *testing.T) {
	beat := &raft.AppendEntriesRequest{Term: 3}
	q, c := newQuiet(50 * time.Millisecond) // a hold of 250 ms
	if q.Reached("f1", 3) {
		t.Fatal("a follower never sent to was reached")
	}
	sendTo(q, "f1", beat, accepts)
	sendTo(q, "f2", beat, accepts)
	c.t = c.t.Add(249 * time.Millisecond)
	if !q.Reached("f1", 3) || !q.Reached("f2", 3) {
		t.Fatal("followers that answered a heartbeat 249 ms ago were not reached")
	}
	if q.Reached("f1", 4) {
		t.Fatal("a follower that answered in term 3 was reached in term 4")
	}
	sendTo(q, "f1", beat, func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
		return raft.AppendEntriesResponse{}, errors.New("connection refused")
	})
	if q.Reached("f1", 3) {
		t.Fatal("a follower whose last heartbeat failed was reached")
	}
	c.t = c.t.Add(time.Millisecond)
	if q.Reached("f2", 3) {
		t.Fatal("a follower last heard from a heartbeat timeout ago was reached")
	}
	// An append carrying entries keeps it reached, as a heartbeat does.
	sendTo(q, "f2", beat, accepts)
	c.t = c.t.Add(200 * time.Millisecond)
	sendTo(q, "f2", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 10, PrevLogTerm: 3, LeaderCommitIndex: 10, Entries: []*raft.Log{{Index: 11, Term: 3}}}, accepts)
	c.t = c.t.Add(200 * time.Millisecond)
	if !q.Reached("f2", 3) {
		t.Fatal("a follower that took entries 200 ms ago was not reached")
	}
}

// Failed tells a follower that refused the leader's last try (a stopped
// peer) from one the leader has not tried yet: a stopping leader waits
// for the second to be reached, not for the first.
func TestQuietAppends_AFollowerFailedUntilItAnswersAgain(t *testing.T) {
	beat := &raft.AppendEntriesRequest{Term: 3}
	down := func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
		return raft.AppendEntriesResponse{}, errors.New("connection refused")
	}
	q, _ := newQuiet(50 * time.Millisecond)
	if q.Failed("f1", 3) {
		t.Fatal("a follower never tried failed")
	}
	sendTo(q, "f1", beat, down)
	if !q.Failed("f1", 3) {
		t.Fatal("a follower whose heartbeat failed did not fail")
	}
	if q.Failed("f1", 4) {
		t.Fatal("a follower that failed in term 3 failed in term 4")
	}
	// A refusal is an answer: the follower is there.
	sendTo(q, "f1", idle(3, 100, 100), func(a *raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
		return raft.AppendEntriesResponse{Term: a.Term, LastLog: 90}, nil
	})
	if q.Failed("f1", 3) {
		t.Fatal("a follower that answered after its failure still failed")
	}
}
