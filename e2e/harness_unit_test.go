package e2e

import "testing"

// FreeAddr never hands out one address twice in a process, though the
// kernel may give a port just released again: a cluster whose two nodes
// got the same port could not start.
func TestFreeAddr_NeverTheSameTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 3000 {
		a := FreeAddr(t)
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
}
