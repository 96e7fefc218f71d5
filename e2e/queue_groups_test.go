package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// groupRow is a row of `raftmqctl --json list_groups`.
type groupRow struct {
	Name    string   `json:"name"`
	Leader  string   `json:"leader"`
	Members []string `json:"members"`
	Online  []string `json:"online"`
}

// groupsOn is the groups node n runs, by name, as raftmqctl lists them.
func groupsOn(t *testing.T, n *Node) (map[string]groupRow, error) {
	return ctlRows(t, n, func(r groupRow) string { return r.Name }, "list_groups", "name", "leader", "members", "online")
}

// ctlRows runs a raftmqctl listing with --json on n and returns its rows
// by name.
func ctlRows[R any](t *testing.T, n *Node, name func(R) string, args ...string) (map[string]R, error) {
	t.Helper()
	out, errOut, code := ctlRun(t, n, append([]string{"--json"}, args...)...)
	if code != 0 {
		return nil, fmt.Errorf("raftmqctl %s on %s: exit %d: %s", args[0], n.ID, code, errOut)
	}
	var rows []R
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", n.ID, err, out)
	}
	by := map[string]R{}
	for _, r := range rows {
		by[name(r)] = r
	}
	return by, nil
}

// Three real nodes started with --queue-groups 3 run the metadata group
// and three queue groups of three members, each led by a different node
// (the members meant to lead them, spread). A kill -9 of the node that
// leads a queue group leaves that group to another member, and the node
// back runs its groups again.
func TestQueueGroups_RealNodesRunAndFollowTheirGroups(t *testing.T) {
	c := StartClusterWith(t, 3, func(_ int, n *Node) {
		n.ExtraArgs = append(n.ExtraArgs, "--queue-groups", "3")
	})
	queueGroups := []string{"q1", "q2", "q3"}
	steady := func(live []*Node, want int) (map[string]string, error) {
		leaders := map[string]string{}
		for _, n := range live {
			gs, err := groupsOn(t, n)
			if err != nil {
				return nil, err
			}
			for _, id := range queueGroups {
				g, ok := gs[id]
				if !ok {
					return nil, fmt.Errorf("%s does not run group %s: %v", n.ID, id, gs)
				}
				if len(g.Members) != 3 || len(g.Online) != want || g.Leader == "" {
					return nil, fmt.Errorf("%s: group %+v", n.ID, g)
				}
				if l, seen := leaders[id]; seen && l != g.Leader {
					return nil, fmt.Errorf("group %s: leader %s on one node, %s on %s", id, l, g.Leader, n.ID)
				}
				leaders[id] = g.Leader
			}
		}
		return leaders, nil
	}
	var leaders map[string]string
	if err := Eventually(60*time.Second, func() (err error) {
		leaders, err = steady(c.Nodes, 3)
		if err == nil {
			led := map[string]bool{}
			for _, l := range leaders {
				led[l] = true
			}
			if len(led) != 3 {
				err = fmt.Errorf("queue groups led by %v, want one each", leaders)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	victim := slices.IndexFunc(c.Nodes, func(n *Node) bool { return n.ID == leaders["q1"] })
	c.Kill(victim)
	killed := time.Now()
	live := slices.Delete(slices.Clone(c.Nodes), victim, victim+1)
	if err := Eventually(30*time.Second, func() error {
		ls, err := steady(live, 2)
		if err == nil && ls["q1"] == c.Nodes[victim].ID {
			err = fmt.Errorf("q1 still led by %s, killed", ls["q1"])
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s killed: q1 led by another member %v later, as seen by raftmqctl", c.Nodes[victim].ID, time.Since(killed).Round(time.Millisecond))

	c.Start(victim)
	c.WaitReady(victim, 60*time.Second)
	if err := Eventually(60*time.Second, func() error {
		_, err := steady(c.Nodes, 3)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// On three real nodes with queue groups, raftmqctl shrink takes a node
// out of every queue group, as rabbitmq-queues shrink removes its
// replicas, and the node stays in the cluster: a client on it publishes
// to a placed queue, confirmed, and consumes every message, in order.
// rebalance leaves the node out; grow puts it back in every group.
func TestQueueGroups_AShrunkNodeServesItsClients(t *testing.T) {
	skipShort(t)
	c := placed3.start(t)
	shrunk := c.Nodes[2]
	ch := channel(t, dial(t, c.Nodes[0]))
	mustDeclare(t, ch, "sh.q", nil)
	publishConfirmed(t, ch, "", "sh.q", numbered(0, 10))
	members := func(want func([]string) bool) {
		t.Helper()
		if err := Eventually(30*time.Second, func() error {
			rows, err := queuesOn(t, c.Nodes[0])
			if err != nil {
				return err
			}
			if r := rows["sh.q"]; r.Group == metadataGroup || !want(r.Members) {
				return fmt.Errorf("sh.q: %+v", r)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	without := func(ms []string) bool { return len(ms) == 2 && !slices.Contains(ms, shrunk.ID) }
	members(func(ms []string) bool { return len(ms) == 3 })

	out := ctl(t, c.Nodes[0], "shrink", shrunk.ID)
	if !strings.Contains(out, "sh.q") || strings.Contains(out, "error") {
		t.Fatalf("shrink: %q", out)
	}
	members(without)
	ctl(t, c.Nodes[0], "rebalance")
	members(without)

	// The shrunk node serves: a publish through it is confirmed, and a
	// consumer on it gets every message of the queue, in order.
	on := channel(t, dial(t, shrunk))
	publishConfirmed(t, on, "", "sh.q", numbered(10, 20))
	d, err := on.Consume("sh.q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range receive(t, d, 20, 30*time.Second) {
		if string(m.Body) != fmt.Sprint(i) || m.Redelivered {
			t.Fatalf("message %d through the shrunk node is %q (redelivered %v)", i, m.Body, m.Redelivered)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	members(without)

	ctl(t, c.Nodes[0], "grow", shrunk.ID)
	members(func(ms []string) bool { return len(ms) == 3 && slices.Contains(ms, shrunk.ID) })
}
