package fsm_test

import (
	"strconv"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// BenchmarkPacedBehindBacklog applies the entries of a paced publisher
// and its consumer on one queue (a publish, then the ack of its
// delivery) while another queue holds a backlog: the cost of a cycle
// must not grow with the backlog. It does not: 2-48 us a cycle with none
// and with 1,000,000 queued on a shared 2-core machine, where a walk of
// the backlog would cost tens of milliseconds.
func BenchmarkPacedBehindBacklog(b *testing.B) {
	for _, n := range []int{0, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			m := fsmtest.New(b)
			fsmtest.One(b, m, 2, declare("backlog", nil))
			fsmtest.One(b, m, 2, declare("q", nil))
			fill(m, "backlog", n)
			fsmtest.One(b, m, 3, consume("q", "c", ch1, 100))
			pub := &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: make([]byte, 1024), Channel: ch2}}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m.Apply(entry(m, 4, pub), fsm.DiscardSink{})
				m.Apply(entry(m, 4, settle(ch1, uint64(i+1), false)), fsm.DiscardSink{})
			}
		})
	}
}

// BenchmarkStatsBehindBacklog reads the machine's totals (what the
// metrics and the body reclaimer read under the state lock) with
// 1,000,000 messages queued, none of them overdue: the read must not
// walk the backlog (42 ms when it did, 0.4 us now).
func BenchmarkStatsBehindBacklog(b *testing.B) {
	m := fsmtest.New(b)
	fsmtest.One(b, m, 2, declare("backlog", nil))
	fill(m, "backlog", 1_000_000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if st := m.Stats(); st.Ready != 1_000_000 || st.Overdue != 0 {
			b.Fatalf("stats %+v", st)
		}
	}
}
