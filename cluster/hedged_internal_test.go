package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// members is a pick over a fixed list, as effectsSource gives them.
func members(ids ...string) func(int) (string, string) {
	return func(attempt int) (string, string) {
		if len(ids) == 0 {
			return "", ""
		}
		id := ids[attempt%len(ids)]
		return id, id + ":5680"
	}
}

// hedgedResult runs hedged on its own goroutine and waits for its result
// for far longer than any hedge in these tests: a call that waits for the
// member that never answers fails the test instead of hanging it.
func hedgedResult(t *testing.T, ctx context.Context, hedge time.Duration, pick func(int) (string, string),
	call func(context.Context, string, string) (string, error)) (string, error) {
	t.Helper()
	type result struct {
		v   string
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := hedged(ctx, hedge, 3, pick, call)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("no answer: the question waited on the member that does not answer")
		return "", nil
	}
}

// A member that froze is asked first and never answers: the next one is
// asked after the hedge, its answer is the result, and the frozen one's
// call is cancelled.
func TestHedged_AMemberThatDoesNotAnswerHoldsNothingUp(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	cancelled := make(chan struct{})
	v, err := hedgedResult(t, context.Background(), 10*time.Millisecond, members("frozen", "live"),
		func(ctx context.Context, member, _ string) (string, error) {
			mu.Lock()
			calls = append(calls, member)
			mu.Unlock()
			if member == "frozen" {
				<-ctx.Done()
				close(cancelled)
				return "", ctx.Err()
			}
			return "from " + member, nil
		})
	if err != nil || v != "from live" {
		t.Fatalf("got %q, %v; want the live member's answer", v, err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the frozen member's call was not cancelled once the answer came")
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(calls, ",") != "frozen,live" {
		t.Errorf("asked %v, want frozen then live", calls)
	}
}

// A member that fails has the next asked at once, without waiting for
// the hedge.
func TestHedged_AFailureAsksTheNextAtOnce(t *testing.T) {
	v, err := hedgedResult(t, context.Background(), time.Hour, members("gone", "live"),
		func(_ context.Context, member, _ string) (string, error) {
			if member == "gone" {
				return "", errors.New("connection refused")
			}
			return "from " + member, nil
		})
	if err != nil || v != "from live" {
		t.Fatalf("got %q, %v; want the live member's answer", v, err)
	}
}

// Each member is asked once however often pick names it; when none
// answers the error is the last failure, and with no member at all it
// says so.
func TestHedged_EachMemberOnceAndTheLastFailure(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	_, err := hedgedResult(t, context.Background(), time.Millisecond, members("a", "a", "b"),
		func(_ context.Context, member, _ string) (string, error) {
			mu.Lock()
			asked[member]++
			n := len(asked)
			mu.Unlock()
			return "", fmt.Errorf("failure %d", n)
		})
	if err == nil || !strings.Contains(err.Error(), "failure") {
		t.Fatalf("err %v, want the members' failure", err)
	}
	if asked["a"] != 1 || asked["b"] != 1 || len(asked) != 2 {
		t.Errorf("asked %v, want a and b once each", asked)
	}
	if _, err := hedgedResult(t, context.Background(), time.Millisecond, members(),
		func(context.Context, string, string) (string, error) { return "", nil }); err == nil || err.Error() != "no member known" {
		t.Errorf("without members: err %v, want no member known", err)
	}
}

// The caller's end ends the question, with every member still out.
func TestHedged_TheCallersEndEndsIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 3)
	go func() {
		for range 3 {
			<-started
		}
		cancel()
	}()
	_, err := hedgedResult(t, ctx, time.Millisecond, members("a", "b", "c"),
		func(ctx context.Context, _, _ string) (string, error) {
			started <- struct{}{}
			<-ctx.Done()
			return "", ctx.Err()
		})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want the caller's cancel", err)
	}
}
