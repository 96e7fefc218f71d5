package queue

import (
	"testing"

	"github.com/raftmq/raftmq/ttl"
)

func prioMsg(q *Queue, deadline int64, body string, prio uint32) *Message {
	m := msg(q, deadline, body)
	m.Priority = uint8(min(prio, 255))
	return m
}

func TestQueue_PriorityOrder(t *testing.T) {
	var q Queue
	q.SetMaxPriority(5)
	// Priority above the maximum counts as the maximum; no property as 0.
	q.PushBack(prioMsg(&q, ttl.NoDeadline, "a", 1))
	q.PushBack(msg(&q, ttl.NoDeadline, "b"))
	q.PushBack(prioMsg(&q, ttl.NoDeadline, "c", 9))
	q.PushBack(prioMsg(&q, ttl.NoDeadline, "d", 1))
	q.PushBack(prioMsg(&q, ttl.NoDeadline, "e", 5))
	if got := bodies(&q); got != "ceadb" {
		t.Fatalf("order %q, want highest priority first, FIFO within one", got)
	}
	x, y := q.PopFront(), q.PopFront()
	if text(x) != "c" || text(y) != "e" {
		t.Fatalf("popped %q %q", text(x), text(y))
	}
	z := q.PopFront() // a
	// Requeued messages go back to the head of their own priority.
	q.PushFront([]*Message{x, z, y})
	if got := bodies(&q); got != "ceadb" {
		t.Fatalf("after requeue %q", got)
	}
	if q.Len() != 5 || q.Bytes() != 5 {
		t.Fatalf("len %d bytes %d", q.Len(), q.Bytes())
	}
}

func TestQueue_PriorityExpiryIsPerMessage(t *testing.T) {
	var q Queue
	q.SetMaxPriority(2)
	// A low-priority message due first dies first, whatever sits above it.
	q.PushBack(prioMsg(&q, 500, "hi", 2))
	q.PushBack(prioMsg(&q, 100, "lo", 0))
	q.PushBack(prioMsg(&q, ttl.NoDeadline, "mid", 1))
	if d, ok := q.EarliestDeadline(); !ok || d != 100 {
		t.Fatalf("earliest %d %v", d, ok)
	}
	out := q.PopExpired(100)
	if len(out) != 1 || text(&out[0]) != "lo" {
		t.Fatalf("expired %v", out)
	}
	if got := bodies(&q); got != "himid" {
		t.Fatalf("left %q", got)
	}
	out = q.PopExpired(500)
	if len(out) != 1 || text(&out[0]) != "hi" || q.Len() != 1 || text(q.Peek()) != "mid" {
		t.Fatalf("second expiry %v, head %v", out, q.Peek())
	}
	m := q.PopFront()
	q.PushBack(m)
	q.Remove(m)
	if q.Len() != 0 || q.Peek() != nil {
		t.Fatal("remove")
	}
}

func TestQueue_PurgeKeepsPriorities(t *testing.T) {
	var q Queue
	q.SetMaxPriority(3)
	q.PushBack(prioMsg(&q, ttl.NoDeadline, "a", 1))
	q.Purge()
	q.PushBack(prioMsg(&q, ttl.NoDeadline, "b", 1))
	q.PushBack(prioMsg(&q, ttl.NoDeadline, "c", 3))
	if got := bodies(&q); got != "cb" {
		t.Fatalf("after purge %q", got)
	}
}
