package queue

import (
	"cmp"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"testing"

	"github.com/raftmq/raftmq/ttl"
)

// model is the queue as plain slices of messages, one per priority.
type model struct {
	lanes [][]Message
	max   uint8
}

func (md *model) prio(m *Message) int { return int(min(m.Priority, md.max)) }

func (md *model) all() []Message {
	var out []Message
	for p := len(md.lanes) - 1; p >= 0; p-- {
		out = append(out, md.lanes[p]...)
	}
	return out
}

func key(m *Message) string {
	b, _ := m.Inline()
	return fmt.Sprintf("%s|%s|%x|%v|%d|%d|%d|%d|%d|%d|%v|%v|%d|%d|%q", m.Exchange, m.RoutingKey, m.Props, m.BCC(), m.Body, m.Enqueued,
		m.Deadline, m.MsgTTL, m.Seq, m.Returns, m.Priority, m.Persistent, boolInt(m.Redelivered), m.Failures(), b)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The record queue behaves as a list of messages: random pushes at both
// ends, pops, removals, expiries and deadline updates, over several
// blocks, with priorities, agree with the model at every step.
func TestQueue_Model(t *testing.T) { queueModel(t, nil) }

// queueModel runs the model's workload; caps, when not nil, takes
// captures along it and checks them (cow_test.go).
func queueModel(t *testing.T, caps *captures) {
	maxBlocks, compactions := 0, 0
	seeds := int64(12)
	if testing.Short() || caps != nil {
		seeds = 4 // captures read every message at each: slower
	}
	for seed := int64(0); seed < seeds; seed++ {
		r := rand.New(rand.NewSource(seed))
		var q Queue
		tab := &Table{}
		q.SetTable(tab)
		md := &model{}
		if seed%3 == 1 {
			q.SetMaxPriority(3)
			md.max = 3
		}
		md.lanes = make([][]Message, int(md.max)+1)
		var out []Message // taken, to requeue
		now := int64(0)
		newMsg := func() *Message {
			m := &Message{Exchange: "x" + strconv.Itoa(r.Intn(2)), RoutingKey: "k" + strconv.Itoa(r.Intn(3)), Seq: q.NextSeq(),
				Enqueued: now, MsgTTL: -1, Deadline: ttl.NoDeadline, Priority: uint8(r.Intn(5)), Persistent: r.Intn(2) == 0,
				Body: Body{Index: uint64(r.Intn(1000) + 1), Pos: uint32(r.Intn(4)), Size: uint32(r.Intn(2000))}}
			if r.Intn(3) == 0 {
				m.Props = []byte{byte(r.Intn(3))}
			}
			if r.Intn(2) == 0 {
				m.Deadline = now + int64(r.Intn(500))
			}
			if r.Intn(20) == 0 {
				m.SetBCC([]string{"b" + strconv.Itoa(r.Intn(2))})
			}
			if r.Intn(30) == 0 {
				m.SetInline([]byte("in" + strconv.Itoa(r.Intn(3))))
			}
			return m
		}
		steps := 4000
		for i := 0; i < steps; i++ {
			now += int64(r.Intn(3))
			switch k := r.Intn(100); {
			case k < 45 || (k < 60 && i < steps/2):
				n := 1 + r.Intn(40)
				for ; n > 0; n-- {
					m := newMsg()
					q.PushBack(m)
					md.lanes[md.prio(m)] = append(md.lanes[md.prio(m)], *m)
				}
			case k < 65:
				for n := r.Intn(30); n > 0; n-- {
					m := q.PopFront()
					all := md.all()
					if len(all) == 0 {
						if m != nil {
							t.Fatalf("seed %d step %d: popped from empty", seed, i)
						}
						break
					}
					want := all[0]
					p := md.prio(&want)
					md.lanes[p] = md.lanes[p][1:]
					if m == nil || key(m) != key(&want) {
						t.Fatalf("seed %d step %d: popped %v, want %v", seed, i, m, want)
					}
					out = append(out, *m)
				}
			case k < 72:
				if len(out) == 0 {
					continue
				}
				r.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
				n := 1 + r.Intn(len(out))
				back := out[:n]
				var ms []*Message
				by := make([][]Message, len(md.lanes))
				for j := range back {
					m := back[j]
					m.Redelivered = true
					if r.Intn(3) == 0 {
						m.Returns++
					}
					if r.Intn(4) == 0 {
						m.SetFailures(m.Failures() + 1)
					}
					ms = append(ms, &m)
					by[md.prio(&m)] = append(by[md.prio(&m)], m)
				}
				q.PushFront(ms)
				for p := range by {
					md.lanes[p] = append(by[p], md.lanes[p]...)
				}
				out = append([]Message(nil), out[n:]...)
			case k < 80:
				all := md.all()
				if len(all) == 0 {
					continue
				}
				want := all[r.Intn(len(all))]
				got := q.Remove(&want)
				p := md.prio(&want)
				md.lanes[p] = slices.DeleteFunc(md.lanes[p], func(m Message) bool { return m.Seq == want.Seq })
				if got == nil || key(got) != key(&want) {
					t.Fatalf("seed %d step %d: removed %v, want %v", seed, i, got, want)
				}
				if q.Remove(&want) != nil {
					t.Fatalf("seed %d step %d: removed twice", seed, i)
				}
			case k < 92:
				now += int64(r.Intn(100))
				got := q.PopExpired(now)
				var want []Message
				for p := range md.lanes {
					md.lanes[p] = slices.DeleteFunc(md.lanes[p], func(m Message) bool {
						if m.Deadline <= now {
							want = append(want, m)
							return true
						}
						return false
					})
				}
				slices.SortFunc(want, func(a, b Message) int {
					return cmp.Or(cmp.Compare(a.Deadline, b.Deadline), cmp.Compare(a.Seq, b.Seq))
				})
				if len(got) != len(want) {
					t.Fatalf("seed %d step %d: %d expired, want %d", seed, i, len(got), len(want))
				}
				for j := range got {
					if key(&got[j]) != key(&want[j]) {
						t.Fatalf("seed %d step %d: expired %v, want %v", seed, i, got[j], want[j])
					}
				}
			case k < 94:
				shift := int64(r.Intn(200))
				f := func(m *Message) int64 {
					if m.Seq%3 == 0 {
						return ttl.NoDeadline
					}
					return m.Enqueued + shift
				}
				q.UpdateDeadlines(f)
				for p := range md.lanes {
					for j := range md.lanes[p] {
						md.lanes[p][j].Deadline = f(&md.lanes[p][j])
					}
				}
			case k < 95:
				all := md.all()
				if n := q.Purge(); n != len(all) {
					t.Fatalf("seed %d step %d: purged %d, want %d", seed, i, n, len(all))
				}
				for p := range md.lanes {
					md.lanes[p] = nil
				}
			default:
				m := q.Peek()
				all := md.all()
				if (m == nil) != (len(all) == 0) || (m != nil && key(m) != key(&all[0])) {
					t.Fatalf("seed %d step %d: peek %v", seed, i, m)
				}
				if len(all) > 0 {
					seq, d, ok := q.Head()
					if !ok || seq != all[0].Seq || d != all[0].Deadline {
						t.Fatalf("seed %d step %d: head %d %d", seed, i, seq, d)
					}
				}
			}
			if caps != nil {
				caps.step(tab, &q, nil)
			}
			for p := range q.lanes {
				maxBlocks = max(maxBlocks, len(q.lanes[p].blocks))
				if q.lanes[p].holes > 0 && r.Intn(1000) == 0 {
					q.lanes[p].compact(q.t.cow)
					compactions++
				}
			}
			all := md.all()
			var bytes int64
			pers, due := 0, 0
			for _, m := range all {
				bytes += m.Size()
				if m.Persistent {
					pers++
				}
				if m.Deadline <= now {
					due++
				}
			}
			if q.Len() != len(all) || q.Bytes() != bytes || q.Persistent() != pers || q.CountDue(now) != due {
				t.Fatalf("seed %d step %d: len %d/%d bytes %d/%d persistent %d/%d due %d/%d", seed, i, q.Len(), len(all), q.Bytes(), bytes,
					q.Persistent(), pers, q.CountDue(now), due)
			}
			if i%50 == 0 || q.Len() < 5 {
				j := 0
				q.Each(func(m *Message) {
					if j >= len(all) || key(m) != key(&all[j]) {
						t.Fatalf("seed %d step %d: message %d differs", seed, i, j)
					}
					j++
				})
				if j != len(all) {
					t.Fatalf("seed %d step %d: each saw %d of %d", seed, i, j, len(all))
				}
			}
		}
		if caps != nil {
			caps.releaseAll()
			// The table frees what it kept for them at its next change
			// (the purge, unless the queue is empty already).
			tab.settle()
		}
		q.Purge()
		if tab.Entries() != 0 {
			t.Fatalf("seed %d: %d table entries left after purge", seed, tab.Entries())
		}
		if _, blocks := tab.Slabs(); blocks != 0 {
			t.Fatalf("seed %d: %d slab blocks in use after purge", seed, blocks)
		}
	}
	if maxBlocks < 3 || compactions == 0 {
		t.Fatalf("the workload reached %d blocks in a lane and forced %d compactions", maxBlocks, compactions)
	}
}
