package group

import (
	"testing"

	"github.com/hashicorp/raft"
)

func TestAppendBudget(t *testing.T) {
	logs := func(sizes ...int) []*raft.Log {
		var out []*raft.Log
		for i, n := range sizes {
			out = append(out, &raft.Log{Index: uint64(i + 1), Data: make([]byte, n)})
		}
		return out
	}
	for _, c := range []struct {
		sizes []int
		want  int
	}{
		{nil, 0},
		{[]int{100}, 1},
		{[]int{1000}, 1}, // the first always goes
		{[]int{10, 20, 30}, 3},
		{[]int{60, 40, 1}, 2},
		{[]int{60, 41, 1}, 1},
		{[]int{0, 0, 200, 0}, 2},
	} {
		if got := appendBudget(logs(c.sizes...), 100); len(got) != c.want {
			t.Errorf("sizes %v: %d entries sent, want %d", c.sizes, len(got), c.want)
		}
	}
}
