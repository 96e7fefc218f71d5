package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// On five real nodes with a queue group per node, every node is a
// member of three of the five queue groups, so the node that answers
// raftmqctl rebalance (the metadata group's leader) runs only some of
// them, and hears of the others' leaders by gossip, later than they
// move. Its table still counts every group's leader, each as the node
// leading it says: row by row what each node's own list_groups says it
// leads, six groups in all.
func TestRebalance_CountsTheLeadersOfGroupsTheAnsweringNodeDoesNotRun(t *testing.T) {
	skipShort(t)
	c := StartClusterWith(t, 5, func(_ int, n *Node) {
		n.ExtraArgs = append(n.ExtraArgs, "--queue-groups", "per-node", "--place-queues")
	})
	if err := Eventually(90*time.Second, func() error {
		gs, err := groupsOn(t, c.Nodes[0])
		if err != nil {
			return err
		}
		if len(gs) != 6 {
			return fmt.Errorf("%s lists %v, want the metadata group and five queue groups", c.Nodes[0].ID, slices.Sorted(maps.Keys(gs)))
		}
		for _, g := range gs {
			if g.Name != metadataGroup && (len(g.Members) != 3 || !slices.Contains(g.Members, g.Leader)) {
				return fmt.Errorf("group %+v, want three members, one of them leading", g)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	var last string
	if err := Eventually(60*time.Second, func() error {
		table, err := rebalanceTable(t, c.Nodes[0])
		if err != nil {
			return err
		}
		leads := map[string]int{}
		for _, n := range c.Nodes {
			gs, err := groupsOn(t, n)
			if err != nil {
				return err
			}
			for _, g := range gs {
				if g.Leader == n.ID {
					leads[n.ID]++
				}
			}
		}
		last = fmt.Sprintf("rebalance says %v; the nodes say they lead %v", table, leads)
		total := 0
		for _, k := range leads {
			total += k
		}
		if total != 6 {
			return fmt.Errorf("%s: %d groups led, want 6", last, total)
		}
		if !maps.Equal(table, leads) {
			return fmt.Errorf("%s", last)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Log(last)
}

// rebalanceTable runs raftmqctl rebalance on n and returns its "Number of
// raft groups" by node, nodes that lead none left out. A refusal (a move
// that met an election) is an error to try again after.
func rebalanceTable(t *testing.T, n *Node) (map[string]int, error) {
	t.Helper()
	out, errOut, code := ctlRun(t, n, "rebalance")
	if code != 0 {
		return nil, fmt.Errorf("raftmqctl rebalance: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "Number of raft groups") {
		t.Fatalf("rebalance: %q", out)
	}
	table := map[string]int{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("rebalance row %q: %q", l, out)
		}
		groups, err := strconv.Atoi(f[3])
		if err != nil {
			t.Fatalf("rebalance row %q: %q", l, out)
		}
		if groups > 0 {
			table[f[0]] = groups
		}
	}
	return table, nil
}
