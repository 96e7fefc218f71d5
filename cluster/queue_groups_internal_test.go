package cluster

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
)

func TestWantQueueGroups(t *testing.T) {
	for _, tc := range []struct {
		fixed   int
		perNode bool
		voters  int
		want    int
	}{
		{fixed: 0, voters: 5, want: 0},
		{fixed: 3, voters: 5, want: 3},
		{perNode: true, voters: 1, want: MinQueueGroupsPerNode},
		{perNode: true, voters: 3, want: 3},
		{perNode: true, voters: 5, want: 5},
		{perNode: true, voters: 7, want: 7},
		{fixed: 9, perNode: true, voters: 5, want: 9},
		{perNode: true, voters: fsm.MaxQueueGroups + 1, want: fsm.MaxQueueGroups},
		{fixed: fsm.MaxQueueGroups, perNode: true, voters: 3, want: fsm.MaxQueueGroups},
	} {
		if got := wantQueueGroups(tc.fixed, tc.perNode, tc.voters); got != tc.want {
			t.Errorf("wantQueueGroups(%d, %v, %d) = %d, want %d", tc.fixed, tc.perNode, tc.voters, got, tc.want)
		}
	}
}
