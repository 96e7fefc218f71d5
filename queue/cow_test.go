package queue

import (
	"fmt"
	"math/rand"
	"strconv"
	"testing"
)

// captures takes captures of a queue and a heap at random steps of a
// workload and checks that each view reads what they held at its capture,
// from a goroutine of its own while the workload goes on (so that -race
// sees the reads beside the writes), and once more at its release.
type captures struct {
	t     *testing.T
	r     *rand.Rand
	live  []*capt
	taken int
}

type capt struct {
	cp    *Capture
	q     *QueueView
	h     *HeldView
	wantQ []string
	wantH []string
	done  chan error
}

func newCaptures(t *testing.T, seed int64) *captures {
	return &captures{t: t, r: rand.New(rand.NewSource(seed))}
}

func heldKey(m *Message, due int64, aux uint32) string {
	return fmt.Sprintf("%s|%d|%d", key(m), due, aux)
}

func queueKeys(each func(func(*Message))) []string {
	var out []string
	each(func(m *Message) { out = append(out, key(m)) })
	return out
}

func heldKeys(n int, at func(int, *Message) (int64, uint32)) []string {
	var out []string
	var m Message
	for i := 0; i < n; i++ {
		due, aux := at(i, &m)
		out = append(out, heldKey(&m, due, aux))
	}
	return out
}

// read checks c's views against what they held at the capture.
func (c *capt) read() error {
	if c.q != nil {
		if got := queueKeys(c.q.Each); fmt.Sprint(got) != fmt.Sprint(c.wantQ) {
			return fmt.Errorf("queue view: %d messages %v, captured %d %v", len(got), got, len(c.wantQ), c.wantQ)
		}
		if c.q.Len() != len(c.wantQ) {
			return fmt.Errorf("queue view: Len %d, captured %d", c.q.Len(), len(c.wantQ))
		}
	}
	if c.h != nil {
		if got := heldKeys(c.h.Len(), c.h.At); fmt.Sprint(got) != fmt.Sprint(c.wantH) {
			return fmt.Errorf("held view: %v, captured %v", got, c.wantH)
		}
	}
	return nil
}

// step may take a capture of q and h (either may be nil) and may release
// live ones.
func (cs *captures) step(tab *Table, q *Queue, h *Held) {
	for i := 0; i < len(cs.live); i++ {
		if cs.r.Intn(60) == 0 {
			cs.release(cs.live[i])
			cs.live = append(cs.live[:i], cs.live[i+1:]...)
			i--
		}
	}
	if cs.r.Intn(80) != 0 || len(cs.live) >= 3 {
		return
	}
	c := &capt{cp: tab.Capture(), done: make(chan error, 1)}
	if q != nil {
		c.q = q.Capture(c.cp)
		c.wantQ = queueKeys(q.Each)
	}
	if h != nil {
		c.h = h.Capture(c.cp)
		c.wantH = heldKeys(h.Len(), h.At)
	}
	cs.taken++
	go func() { c.done <- c.read() }()
	cs.live = append(cs.live, c)
}

func (cs *captures) release(c *capt) {
	cs.t.Helper()
	if err := <-c.done; err != nil {
		cs.t.Fatalf("read beside the workload: %v", err)
	}
	if err := c.read(); err != nil {
		cs.t.Fatalf("read at release: %v", err)
	}
	c.cp.Release()
}

// releaseAll releases every live capture, after which the table frees
// the entries it kept for them.
func (cs *captures) releaseAll() {
	cs.t.Helper()
	for _, c := range cs.live {
		cs.release(c)
	}
	cs.live = nil
	if cs.taken == 0 {
		cs.t.Fatal("the workload took no capture")
	}
}

// A capture of a queue reads the messages it held at the capture while
// pushes at both ends, pops, removals, expiries, deadline updates,
// compactions and purges go on; the table frees what it kept for the
// captures once they are released (queueModel checks that it is empty
// after the purge).
func TestQueue_CapturesKeepTheirMessages(t *testing.T) {
	queueModel(t, newCaptures(t, 7))
}

// A capture of a heap of held messages reads its records, in slice
// order, while pushes, pops, removals and drops reorder the heap, with
// the queues' table shared.
func TestHeld_CapturesKeepTheirMessages(t *testing.T) {
	for seed := int64(0); seed < 6; seed++ {
		r := rand.New(rand.NewSource(seed))
		tab := &Table{}
		var h Held
		h.SetTable(tab)
		caps := newCaptures(t, seed)
		seq := uint64(0)
		for step := 0; step < 6000; step++ {
			switch k := r.Intn(10); {
			case k < 6 || h.Len() == 0:
				seq++
				m := &Message{Exchange: "x", RoutingKey: "k" + strconv.Itoa(r.Intn(4)), Seq: seq, MsgTTL: -1, Enqueued: int64(step),
					Body: Body{Index: seq, Size: uint32(r.Intn(100))}}
				if r.Intn(10) == 0 {
					m.Returns, m.Redelivered = 1, true
				}
				h.Push(m, int64(r.Intn(5000)), uint32(r.Intn(3)))
			case k < 8:
				var m Message
				h.Pop(&m)
			case k < 9:
				var m Message
				h.Remove(r.Intn(h.Len()), &m)
			default:
				if r.Intn(20) == 0 {
					drop := uint32(r.Intn(3))
					h.Drop(func(aux uint32) bool { return aux == drop }, func(uint32) {})
				}
			}
			caps.step(tab, nil, &h)
		}
		caps.releaseAll()
		var m Message
		for h.Len() > 0 {
			h.Pop(&m)
		}
		if tab.Entries() != 0 {
			t.Fatalf("seed %d: %d table entries left with no message held", seed, tab.Entries())
		}
	}
}
