package fsm

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// queueShadows is what checkQueueChanges saw of each state at its last
// check: its queues and its log's head.
var queueShadows = struct {
	sync.Mutex
	m map[*state]queueShadow
}{m: map[*state]queueShadow{}}

type queueShadow struct {
	queues map[QueueKey]*queueState
	head   uint64
}

// checkQueueChanges compares s's queues with those of its last check:
// every queue declared, deleted, or deleted and declared again since must
// be in the log after the head read then, unless the log restarted.
func (s *state) checkQueueChanges() error {
	now := map[QueueKey]*queueState{}
	for _, v := range s.vhosts {
		for _, q := range v.queues {
			now[QueueKey{Vhost: v.name, Name: q.name}] = q
		}
	}
	queueShadows.Lock()
	before, seen := queueShadows.m[s]
	queueShadows.m[s] = queueShadow{queues: now, head: s.queueChanges.head}
	queueShadows.Unlock()
	if !seen {
		return nil
	}
	logged, ok := s.queueChanges.read(before.head)
	if !ok {
		return nil // the log restarted (a restore): a mirror compares everything
	}
	for k, q := range now {
		if before.queues[k] != q && !slices.Contains(logged, k) {
			return fmt.Errorf("queue %v came without a queue change (logged %v)", k, logged)
		}
	}
	for k := range before.queues {
		if _, ok := now[k]; !ok && !slices.Contains(logged, k) {
			return fmt.Errorf("queue %v went without a queue change (logged %v)", k, logged)
		}
	}
	return nil
}

func TestQueueChanges_ReadFromANumberOn(t *testing.T) {
	m := &Machine{}
	m.queueChanges.restart()
	start := m.QueueChangeHead()
	if keys, ok := m.QueueChanges(start); !ok || len(keys) != 0 {
		t.Fatalf("a fresh log from its head: %v %v", keys, ok)
	}
	m.queueChanges.note("/", "a")
	m.queueChanges.note("v", "b")
	mid := m.QueueChangeHead()
	m.queueChanges.note("/", "a")
	keys, ok := m.QueueChanges(start)
	if want := []QueueKey{{"/", "a"}, {"v", "b"}, {"/", "a"}}; !ok || !slices.Equal(keys, want) {
		t.Fatalf("from the start: %v %v, want %v", keys, ok, want)
	}
	if keys, ok := m.QueueChanges(mid); !ok || !slices.Equal(keys, []QueueKey{{"/", "a"}}) {
		t.Fatalf("from the middle: %v %v", keys, ok)
	}
	if _, ok := m.QueueChanges(start - 1); ok {
		t.Fatal("a number from before the log started reads as complete")
	}
	if _, ok := m.QueueChanges(m.QueueChangeHead() + 1); ok {
		t.Fatal("a number past the head (another machine's) reads as complete")
	}
	// A full log starts afresh: a reader from before compares everything.
	for i := range maxQueueChanges {
		m.queueChanges.note("/", fmt.Sprint(i))
	}
	if _, ok := m.QueueChanges(start); ok {
		t.Fatal("a log that outgrew its bound still reads as complete from its start")
	}
	if len(m.queueChanges.changes) > maxQueueChanges {
		t.Fatalf("the log holds %d changes, more than %d", len(m.queueChanges.changes), maxQueueChanges)
	}
}
