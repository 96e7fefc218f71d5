package fsm

import (
	"container/heap"
	"math"

	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

// What operators see of the delayed messages: the earliest, a listing in
// due order, and each exchange's earliest due time.

// NextDelayed returns the due time (log time, unix ms) and sequence of the
// earliest delayed message: the leader releases it once its clock reaches
// that time.
func (m *Machine) NextDelayed() (due int64, seq uint64, ok bool) { return m.nextDelayed() }

// Delayed lists up to limit messages waiting in delayed exchanges, earliest
// due first; vhost and exchange ("" for all) select them. It walks the
// heap in order without sorting it: cost grows with what it skips and
// returns, not with every message held.
func (m *Machine) Delayed(vhost, exchange string, limit int) []*proto.DelayedMessageInfo {
	h := &m.delayed.held
	var out []*proto.DelayedMessageInfo
	if h.Len() == 0 || limit <= 0 {
		return out
	}
	front := &indexHeap{held: h, idx: []int{0}}
	for front.Len() > 0 && len(out) < limit {
		i := heap.Pop(front).(int)
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < h.Len() {
				heap.Push(front, c)
			}
		}
		_, _, at := h.Key(i)
		v, x := m.delayed.where(at)
		if (vhost != "" && v.name != vhost) || (exchange != "" && x.name != exchange) {
			continue
		}
		var dm queue.Message
		due, _ := h.At(i, &dm)
		props := dm.Properties()
		if d, ok := DelayOf(props.GetHeaders()); ok && d == 0 {
			// Kept without its value (heldProps): the delay it asked for.
			setHeader(props.Headers, "x-delay", listedDelay(due-dm.Enqueued))
		}
		out = append(out, &proto.DelayedMessageInfo{Vhost: v.name, Exchange: x.name, RoutingKey: dm.RoutingKey, Seq: dm.Seq,
			DelayedMs: dm.Enqueued, DueMs: due, BodySize: dm.Body.Size, Properties: props})
	}
	return out
}

// listedDelay is the x-delay shown of a waiting message kept without it:
// the delay, a signed 32-bit integer where it fits.
func listedDelay(d int64) *proto.Value {
	if d <= math.MaxInt32 {
		return &proto.Value{Kind: &proto.Value_Int32{Int32: int32(d)}}
	}
	return &proto.Value{Kind: &proto.Value_Int64{Int64: d}}
}

// indexHeap orders positions of the delayed heap by their messages.
type indexHeap struct {
	held *queue.Held
	idx  []int
}

func (f *indexHeap) Len() int           { return len(f.idx) }
func (f *indexHeap) Less(i, j int) bool { return f.held.Less(f.idx[i], f.idx[j]) }
func (f *indexHeap) Swap(i, j int)      { f.idx[i], f.idx[j] = f.idx[j], f.idx[i] }
func (f *indexHeap) Push(x any)         { f.idx = append(f.idx, x.(int)) }
func (f *indexHeap) Pop() any {
	n := len(f.idx) - 1
	x := f.idx[n]
	f.idx = f.idx[:n]
	return x
}

// delayedDue is the earliest due time of each exchange holding messages.
func (s *state) delayedDue() map[*exchange]int64 {
	h := &s.delayed.held
	if h.Len() == 0 {
		return nil
	}
	out := map[*exchange]int64{}
	for i := 0; i < h.Len(); i++ {
		due, _, at := h.Key(i)
		_, x := s.delayed.where(at)
		if t, ok := out[x]; !ok || due < t {
			out[x] = due
		}
	}
	return out
}
