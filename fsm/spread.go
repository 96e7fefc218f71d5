package fsm

import (
	"cmp"
	"slices"

	"github.com/raftmq/raftmq/proto"
)

// GroupSize is how many members a queue group is spread over: every
// voter when the cluster has fewer.
const GroupSize = 3

// SpreadGroups is the members the queue groups should have among the
// voters (each with its raft address), as the metadata leader proposes
// them (GroupMembers) when the voters change; it returns only the groups
// whose members it changes, in the order of groups. It is a pure
// function of its arguments, so that every leader proposes the same,
// and a fixed point: the groups it returns, spread again, change no
// more.
//
//   - A member that is no longer a voter leaves its group.
//   - A group with fewer than GroupSize members (every voter when there
//     are fewer) gets the voters that are members of the fewest groups.
//   - Memberships move, one at a time, from the voter that is a member
//     of the most groups to the one of the fewest, until they differ by
//     one at most. The member taking another's place takes its place
//     in the list too, and a group the first one leads is the one
//     chosen, so that a new node takes leaderships with its groups.
//   - Within each group the first member, the one meant to lead, is
//     moved so that no group's first member is meant to lead two groups
//     more than another of its members; then, where a voter is meant
//     to lead two more than another that shares none of its groups,
//     leaderships move along a chain of groups between them (shiftLead).
//
// A group with more members than GroupSize (grown by an operator) keeps
// them.
func SpreadGroups(groups []QueueGroup, voters []GroupMember) []QueueGroup {
	addr := map[string]string{}
	var ids []string
	for _, v := range voters {
		if _, ok := addr[v.ID]; !ok {
			ids = append(ids, v.ID)
		}
		addr[v.ID] = v.Addr
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	target := min(GroupSize, len(ids))
	lists := make([][]string, len(groups))
	count := map[string]int{}
	for i, g := range groups {
		for _, m := range g.Members {
			if _, ok := addr[m.ID]; ok && !slices.Contains(lists[i], m.ID) {
				lists[i] = append(lists[i], m.ID)
				count[m.ID]++
			}
		}
	}
	fewest := func(not []string) string {
		best := ""
		for _, id := range ids {
			if !slices.Contains(not, id) && (best == "" || count[id] < count[best]) {
				best = id
			}
		}
		return best
	}
	for i := range lists {
		for len(lists[i]) < target {
			id := fewest(lists[i])
			lists[i] = append(lists[i], id)
			count[id]++
		}
	}
	for {
		most, least := ids[0], ids[0]
		for _, id := range ids {
			if count[id] > count[most] {
				most = id
			}
			if count[id] < count[least] {
				least = id
			}
		}
		if count[most]-count[least] <= 1 {
			break
		}
		// Some group holds most and not least, since most is in more
		// groups; prefer one that most is meant to lead.
		pick := -1
		for i, l := range lists {
			if slices.Contains(l, most) && !slices.Contains(l, least) && (pick < 0 || l[0] == most && lists[pick][0] != most) {
				pick = i
			}
		}
		lists[pick][slices.Index(lists[pick], most)] = least
		count[most]--
		count[least]++
	}
	leads := map[string]int{}
	for _, l := range lists {
		if len(l) > 0 {
			leads[l[0]]++
		}
	}
	for leadWithin(lists, leads) || shiftLead(lists, ids, leads) {
	}
	var out []QueueGroup
	for i, g := range groups {
		ms := make([]GroupMember, 0, len(lists[i]))
		for _, id := range lists[i] {
			ms = append(ms, GroupMember{ID: id, Addr: addr[id]})
		}
		if !slices.Equal(ms, g.Members) {
			out = append(out, QueueGroup{ID: g.ID, Members: ms, Epoch: g.Epoch})
		}
	}
	return out
}

// leadWithin moves, in each group whose first member is meant to lead two
// groups more than another of its members, the first place to the member
// meant to lead fewest, and reports whether it moved any.
func leadWithin(lists [][]string, leads map[string]int) bool {
	moved := false
	for _, l := range lists {
		if len(l) == 0 {
			continue
		}
		b := 0
		for j, id := range l {
			if leads[id] < leads[l[b]] {
				b = j
			}
		}
		if leads[l[0]] > leads[l[b]]+1 {
			leads[l[0]]--
			leads[l[b]]++
			toFront(l, b)
			moved = true
		}
	}
	return moved
}

// toFront makes l[k] the group's first member, the others keeping their
// order.
func toFront(l []string, k int) {
	id := l[k]
	copy(l[1:k+1], l[:k])
	l[0] = id
}

// shiftLead moves one leadership along a chain of groups when a voter is
// meant to lead two more groups than another and no single group holds
// both (a group added to a grown cluster can leave it so): the voter
// leading fewest takes a group it is a member of from that group's first
// member, who takes another from its own, and so on until a voter
// leading at least two more than the first gives one up. It reports
// whether it moved any; repeated, the leaderships differ by one at most
// where the memberships allow it.
// Breadth first from the voter leading fewest, groups in order: a pure
// function. Each move, as each of leadWithin's, takes a leadership from a
// voter leading at least two more than the one it goes to, so SpreadGroups'
// loop over the two ends.
func shiftLead(lists [][]string, ids []string, leads map[string]int) bool {
	most := slices.MaxFunc(ids, func(a, b string) int { return cmp.Compare(leads[a], leads[b]) })
	// The voters leading fewest first (ids are sorted: ties by id).
	starts := slices.Clone(ids)
	slices.SortStableFunc(starts, func(a, b string) int { return cmp.Compare(leads[a], leads[b]) })
	for _, start := range starts {
		if leads[most]-leads[start] <= 1 {
			continue
		}
		// A voter reached is one whose group (via) the voter that
		// reached it (by) could take over; start is reached by none.
		type step struct {
			by  string
			via int
		}
		reached := map[string]step{start: {via: -1}}
		queue := []string{start}
		for len(queue) > 0 {
			id := queue[0]
			queue = queue[1:]
			for gi, l := range lists {
				if len(l) == 0 || l[0] == id || !slices.Contains(l, id) {
					continue
				}
				from := l[0]
				if _, ok := reached[from]; ok {
					continue
				}
				reached[from] = step{by: id, via: gi}
				if leads[from]-leads[start] <= 1 {
					queue = append(queue, from)
					continue
				}
				leads[from]--
				leads[start]++
				for cur := from; cur != start; {
					st := reached[cur]
					g := lists[st.via]
					toFront(g, slices.Index(g, st.by))
					cur = st.by
				}
				return true
			}
		}
	}
	return false
}

// GroupMembersCommand is GroupMembers setting g's members, worked out
// from the group at g.Epoch.
func GroupMembersCommand(g QueueGroup) *proto.Command {
	c := &proto.GroupMembers{Group: g.ID, Epoch: g.Epoch}
	for _, m := range g.Members {
		c.Members = append(c.Members, &proto.QueueGroupMember{Id: m.ID, Addr: m.Addr})
	}
	return &proto.Command{Cmd: &proto.Command_GroupMembers{GroupMembers: c}}
}
