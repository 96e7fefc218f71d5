package fsm_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/raftmq/raftmq/fsm"
)

func nodeIDs(n int) []string {
	var ids []string
	for i := 1; i <= n; i++ {
		ids = append(ids, fmt.Sprintf("n%d", i))
	}
	return ids
}

// created is the groups as the metadata leader creates them: spread
// from no members.
func created(groups int, voters []string) []fsm.QueueGroup {
	var gs []fsm.QueueGroup
	for i := range groups {
		gs = append(gs, fsm.QueueGroup{ID: fmt.Sprintf("q%d", i+1)})
	}
	gs, _ = spread(gs, voters)
	return gs
}

// spread applies SpreadGroups' changes to gs.
func spread(gs []fsm.QueueGroup, voters []string) ([]fsm.QueueGroup, int) {
	out := slices.Clone(gs)
	changed := fsm.SpreadGroups(gs, membersOf(voters...))
	for _, c := range changed {
		for i := range out {
			if out[i].ID == c.ID {
				out[i] = c
			}
		}
	}
	return out, len(changed)
}

// checkSpread: every group's members are voters, none twice, at least
// GroupSize (or every voter); each voter is a member of as many groups
// as any other, give or take one; no group's first member is meant to
// lead two groups more than another of its members; and spreading again
// changes nothing.
func checkSpread(t *testing.T, gs []fsm.QueueGroup, voters []string) (members, leads map[string]int) {
	t.Helper()
	members, leads = map[string]int{}, map[string]int{}
	for _, g := range gs {
		ids := memberIDs(g)
		if len(ids) < min(fsm.GroupSize, len(voters)) || len(ids) > fsm.MaxGroupMembers {
			t.Fatalf("group %s: %v", g.ID, ids)
		}
		for i, id := range ids {
			if !slices.Contains(voters, id) || slices.Contains(ids[:i], id) {
				t.Fatalf("group %s: %v over voters %v", g.ID, ids, voters)
			}
			if g.Members[i].Addr != id+":7000" {
				t.Fatalf("group %s: address %q", g.ID, g.Members[i].Addr)
			}
			members[id]++
		}
		leads[ids[0]]++
	}
	lo, hi := len(gs), 0
	for _, v := range voters {
		lo, hi = min(lo, members[v]), max(hi, members[v])
	}
	if hi-lo > 1 {
		t.Fatalf("memberships %v over %v", members, voters)
	}
	for _, g := range gs {
		for _, m := range g.Members[1:] {
			if leads[g.Members[0].ID] > leads[m.ID]+1 {
				t.Fatalf("group %s led by %s (%d) over %s (%d)", g.ID, g.Members[0].ID, leads[g.Members[0].ID], m.ID, leads[m.ID])
			}
		}
	}
	if again := fsm.SpreadGroups(gs, membersOf(voters...)); len(again) != 0 {
		t.Fatalf("spread again changes %+v", again)
	}
	return members, leads
}

// Groups created at the cluster's size are spread: nothing changes; on
// three nodes each leads one of three groups.
func TestSpreadGroups_CreatedIsSpread(t *testing.T) {
	_, leads := checkSpread(t, created(3, nodeIDs(3)), nodeIDs(3))
	if leads["n1"] != 1 || leads["n2"] != 1 || leads["n3"] != 1 {
		t.Fatalf("leads %v", leads)
	}
	for _, n := range []int{1, 3, 4, 5, 7} {
		for _, k := range []int{1, 2, 3, 5, 8, 64} {
			t.Run(fmt.Sprintf("%d nodes %d groups", n, k), func(t *testing.T) {
				voters := nodeIDs(n)
				gs := created(k, voters)
				if c := fsm.SpreadGroups(gs, membersOf(voters...)); len(c) != 0 {
					t.Fatalf("changes %+v", c)
				}
				checkSpread(t, gs, voters)
			})
		}
	}
}

// Three groups created on three nodes, grown to 5: the new nodes become
// members and are meant to lead some, and each node leads one group at
// most.
func TestSpreadGroups_GrowThreeToFive(t *testing.T) {
	gs := created(3, nodeIDs(3))
	voters := nodeIDs(5)
	gs, changed := spread(gs, voters)
	if changed == 0 {
		t.Fatal("nothing changed")
	}
	members, leads := checkSpread(t, gs, voters)
	if members["n4"] == 0 || members["n5"] == 0 || leads["n4"]+leads["n5"] == 0 {
		t.Fatalf("members %v leads %v: %+v", members, leads, gs)
	}
	for id, l := range leads {
		if l > 1 {
			t.Fatalf("%s leads %d: %+v", id, l, gs)
		}
	}
}

// Grown one node at a time from 1 to 7 and shrunk back, with a node
// leaving from the middle: every step is spread, and the groups follow.
func TestSpreadGroups_GrowAndShrink(t *testing.T) {
	for _, k := range []int{1, 3, 4, 7, 12} {
		t.Run(fmt.Sprintf("%d groups", k), func(t *testing.T) {
			gs := created(k, nodeIDs(1))
			for n := 1; n <= 7; n++ {
				gs, _ = spread(gs, nodeIDs(n))
				checkSpread(t, gs, nodeIDs(n))
			}
			voters := nodeIDs(7)
			for len(voters) > 1 {
				voters = slices.Delete(voters, len(voters)/2, len(voters)/2+1)
				gs, _ = spread(gs, voters)
				checkSpread(t, gs, voters)
			}
		})
	}
}

// Property: from any member lists (nodes that are not voters, too few
// or too many members, duplicates), over 1, 3, 4, 5 or 7 voters, the
// spread holds checkSpread, keeps a group above GroupSize at its size
// when all its members are voters, and is the same for voters given in
// any order.
func TestSpreadGroups_Property(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pool := nodeIDs(9)
	for iter := 0; iter < 2000; iter++ {
		n := []int{1, 3, 4, 5, 7}[r.IntN(5)]
		voters := nodeIDs(n)
		var gs []fsm.QueueGroup
		for i := range 1 + r.IntN(12) {
			g := fsm.QueueGroup{ID: fmt.Sprintf("q%d", i+1)}
			for range r.IntN(fsm.MaxGroupMembers + 1) {
				g.Members = append(g.Members, membersOf(pool[r.IntN(len(pool))])...)
			}
			gs = append(gs, g)
		}
		out, _ := spread(gs, voters)
		checkSpread(t, out, voters)
		if lo, hi := leadSpread(out, voters); hi-lo > 1 {
			t.Fatalf("leaderships from %d to %d: %+v", lo, hi, out)
		}
		shuffled := slices.Clone(voters)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again, _ := spread(gs, shuffled); !slices.EqualFunc(again, out, func(a, b fsm.QueueGroup) bool { return slices.Equal(a.Members, b.Members) }) {
			t.Fatalf("voters in another order: %+v, %+v", again, out)
		}
		for i, g := range gs {
			seen := map[string]bool{}
			ok := true
			for _, m := range g.Members {
				ok = ok && slices.Contains(voters, m.ID) && !seen[m.ID]
				seen[m.ID] = true
			}
			if ok && len(g.Members) > fsm.GroupSize && len(out[i].Members) != len(g.Members) {
				t.Fatalf("group %s of %d members spread to %d", g.ID, len(g.Members), len(out[i].Members))
			}
		}
	}
}

// leadSpread is the fewest and most groups a voter is meant to lead.
func leadSpread(gs []fsm.QueueGroup, voters []string) (lo, hi int) {
	leads := map[string]int{}
	for _, g := range gs {
		leads[g.Members[0].ID]++
	}
	lo = len(gs)
	for _, v := range voters {
		lo, hi = min(lo, leads[v]), max(hi, leads[v])
	}
	return lo, hi
}

// A voter meant to lead two groups more than another that is in none of
// its groups hands one over along a chain: n1 takes q3 from n2, which
// takes q1 from n5. Every voter then leads one, and every membership
// stays.
func TestSpreadGroups_LeadershipsMoveAlongAChain(t *testing.T) {
	voters := nodeIDs(5)
	group := func(id string, ms ...string) fsm.QueueGroup {
		return fsm.QueueGroup{ID: id, Members: membersOf(ms...)}
	}
	gs := []fsm.QueueGroup{
		group("q1", "n5", "n2", "n3"),
		group("q2", "n5", "n3", "n4"),
		group("q3", "n2", "n1", "n4"),
		group("q4", "n3", "n1", "n5"),
		group("q5", "n4", "n1", "n2"),
	}
	out, _ := spread(gs, voters)
	checkSpread(t, out, voters)
	if lo, hi := leadSpread(out, voters); lo != 1 || hi != 1 {
		t.Fatalf("leaderships from %d to %d: %+v", lo, hi, out)
	}
	for i := range gs {
		a, b := memberIDs(gs[i]), memberIDs(out[i])
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			t.Fatalf("group %s: members %v became %v", gs[i].ID, a, b)
		}
	}
}

// With a group per node (--queue-groups per-node), a cluster grown one
// node at a time from three to seven gets a group with each, created as
// the metadata leader creates it and then spread with the others: every
// voter is meant to lead one.
func TestSpreadGroups_AGroupForEachNodeAdded(t *testing.T) {
	gs := created(3, nodeIDs(3))
	for n := 4; n <= 7; n++ {
		voters := nodeIDs(n)
		gs, _ = spread(gs, voters)
		grown := append(slices.Clone(gs), fsm.QueueGroup{ID: fmt.Sprintf("q%d", n)})
		for _, c := range fsm.SpreadGroups(grown, membersOf(voters...)) {
			if c.ID == grown[len(grown)-1].ID {
				grown[len(grown)-1] = c
			}
		}
		gs, _ = spread(grown, voters)
		checkSpread(t, gs, voters)
		if lo, hi := leadSpread(gs, voters); lo != 1 || hi != 1 {
			t.Fatalf("%d nodes: leaderships from %d to %d: %+v", n, lo, hi, gs)
		}
	}
}
