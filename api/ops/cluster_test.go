package ops

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
)

func TestFromFSMStats(t *testing.T) {
	got := fromFSMStats(fsm.Stats{Published: 7, Expired: 3, DeadLettered: 2, Overdue: 1, Dropped: 1, Refused: 2, Rejected: 4, Ready: 5})
	want := StateStats{Published: 7, Expired: 3, DeadLettered: 2, Overdue: 1, Dropped: 7, Ready: 5}
	if got != want {
		t.Fatalf("fromFSMStats %+v, want %+v", got, want)
	}
}

func TestFromFSMStats_Routed(t *testing.T) {
	if s := fromFSMStats(fsm.Stats{Published: 2, Routed: 5}); s.Routed != 5 || s.Published != 2 {
		t.Fatalf("%+v", s)
	}
}
