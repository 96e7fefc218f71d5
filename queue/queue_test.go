package queue

import (
	"testing"

	"github.com/raftmq/raftmq/ttl"
)

func msg(q *Queue, deadline int64, body string) *Message {
	m := &Message{Deadline: deadline, Seq: q.NextSeq(), MsgTTL: -1}
	m.SetInline([]byte(body))
	return m
}

func text(m *Message) string {
	b, _ := m.Inline()
	return string(b)
}

func bodies(q *Queue) string {
	var s string
	q.Each(func(m *Message) { s += text(m) })
	return s
}

func TestQueue_FIFOAndRequeue(t *testing.T) {
	var q Queue
	for _, b := range []string{"a", "b", "c"} {
		q.PushBack(msg(&q, ttl.NoDeadline, b))
	}
	x, y := q.PopFront(), q.PopFront()
	if text(x) != "a" || text(y) != "b" || q.Len() != 1 || q.Bytes() != 1 {
		t.Fatalf("pop: %q %q len %d", text(x), text(y), q.Len())
	}
	q.PushFront([]*Message{x, y})
	if got := bodies(&q); got != "abc" {
		t.Fatalf("after requeue %q", got)
	}
	if n := q.Purge(); n != 3 || q.Len() != 0 || q.Peek() != nil {
		t.Fatal("purge")
	}
}

func TestQueue_PopExpired(t *testing.T) {
	var q Queue
	q.PushBack(msg(&q, ttl.NoDeadline, "k"))
	q.PushBack(msg(&q, 300, "3"))
	q.PushBack(msg(&q, 100, "1"))
	q.PushBack(msg(&q, 300, "4"))
	q.PushBack(msg(&q, 200, "2"))
	q.PushBack(msg(&q, 900, "9"))
	if d, ok := q.EarliestDeadline(); !ok || d != 100 {
		t.Fatalf("earliest %d", d)
	}
	var got string
	for _, m := range q.PopExpired(300) {
		got += text(&m)
	}
	if got != "1234" || bodies(&q) != "k9" || q.Len() != 2 {
		t.Fatalf("expired %q, left %q", got, bodies(&q))
	}
	m := q.PopFront()
	q.UpdateDeadlines(func(*Message) int64 { return 50 })
	if text(m) != "k" || len(q.PopExpired(60)) != 1 || q.Len() != 0 {
		t.Fatal("UpdateDeadlines")
	}
}

func TestQueue_RemoveAnywhere(t *testing.T) {
	var q Queue
	ms := make([]*Message, 5)
	for i := range ms {
		ms[i] = msg(&q, int64(100+i), string(rune('a'+i)))
		q.PushBack(ms[i])
	}
	q.Remove(ms[2])
	if bodies(&q) != "abde" || q.index.Len() != 4 {
		t.Fatalf("remove: %q", bodies(&q))
	}
}
