package group

import (
	"slices"
	"testing"
)

// A replica's first snapshot by size waits budget × its rank among the
// voters' ids / the voters.
func TestStaggerShare(t *testing.T) {
	ids := []string{"n3", "n1", "n2"}
	for _, c := range []struct {
		self string
		want int64
	}{{"n1", 0}, {"n2", 300}, {"n3", 600}, {"n4", 0}} {
		if got := staggerShare(900, slices.Clone(ids), c.self); got != c.want {
			t.Errorf("staggerShare(900, %v, %s) = %d, want %d", ids, c.self, got, c.want)
		}
	}
	if got := staggerShare(900, []string{"n1"}, "n1"); got != 0 {
		t.Errorf("a single voter waits %d", got)
	}
}
