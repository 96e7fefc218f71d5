package fsm_test

import (
	"maps"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
)

// From level 5 each death is counted by reason and by whether its queue
// dead-letters it; below, only the dead-lettered total counts, so a log
// replayed from before the level and a snapshot taken then agree. The
// queue the dead-lettered messages died in counts them too.
func TestMachine_DeathsByReason(t *testing.T) {
	var counts []fsm.QueueCounts
	run := func(level uint32) fsm.Stats {
		m := fsmtest.NewAt(t, level)
		fsmtest.One(t, m, 2, declare("dead", nil))
		fsmtest.One(t, m, 2, declare("plain", table("x-message-ttl", i64(10))))
		fsmtest.One(t, m, 2, declare("dl", table("x-message-ttl", i64(10), "x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dead"))))
		fsmtest.One(t, m, 3, publish("", "plain", "a", nil))
		fsmtest.One(t, m, 3, publish("", "dl", "b", nil))
		fsmtest.One(t, m, 3, publish("", "dl", "c", nil))
		fsmtest.One(t, m, 20, expire("plain", "dl"))
		fsmtest.One(t, m, 21, get("dead", false))
		fsmtest.One(t, m, 22, discard(ch1, 1, false))
		counts = m.QueueCounts()
		return m.Stats()
	}
	st := run(5)
	if got, want := st.Deaths, [4][2]uint64{{1, 2}, {0, 0}, {1, 0}, {0, 0}}; got != want {
		t.Fatalf("deaths at level 5 %v, want %v", got, want)
	}
	if st.DeadLettered != 2 {
		t.Fatalf("dead-lettered %d", st.DeadLettered)
	}
	dead := map[string]uint64{}
	for _, c := range counts {
		dead[c.Name] = c.DeadLettered
	}
	if want := map[string]uint64{"dead": 0, "plain": 0, "dl": 2}; !maps.Equal(dead, want) {
		t.Fatalf("dead-lettered by queue %v, want %v", dead, want)
	}
	if st := run(4); st.Deaths != [4][2]uint64{} || st.DeadLettered != 2 {
		t.Fatalf("level 4: deaths %v, dead-lettered %d", st.Deaths, st.DeadLettered)
	}
}
