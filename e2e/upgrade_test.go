package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// landedRelease is the last release of raftmq before queue groups ran
// queue duties: a cluster of it is upgraded in place by the test below.
const landedRelease = "458bcee"

// releaseBinary builds cmd/raftmq of rev from this checkout's history, or
// skips the test when the history or the build is not to be had (a
// shallow clone, no module proxy).
func releaseBinary(t *testing.T, rev string) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("release %s is not in this checkout's history (%v: %s): the upgrade test needs a full clone", rev, err, out)
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, rev, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(t.TempDir(), "raftmq-"+rev)
	build := exec.Command("go", "build", "-o", bin, "./cmd/raftmq")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "dial tcp") || strings.Contains(string(out), "proxy") {
			t.Skipf("release %s cannot be built here (its modules are not to be had): %s", rev, out)
		}
		t.Fatalf("go build of release %s: %v\n%s", rev, err, out)
	}
	return bin
}

// upgradeNode stops node i of c and starts it again on its data with this
// build, and args added to its flags.
func upgradeNode(t *testing.T, c *Cluster, i int, args ...string) {
	t.Helper()
	c.Stop(i)
	if _, err := c.WaitExit(i, 60*time.Second); err != nil {
		t.Fatalf("%s did not stop: %v", c.Nodes[i].ID, err)
	}
	c.Nodes[i].Bin = ""
	c.Nodes[i].ExtraArgs = append(c.Nodes[i].ExtraArgs, args...)
	c.Start(i)
	c.WaitReady(i, 60*time.Second)
}

// A cluster of the landed release upgraded in place, one node at a time,
// each restarted on its data with this build, --queue-groups 3 and
// --place-queues: every step serves publishes through the upgraded node,
// and at the end every message published before and during the upgrade
// is there exactly once, in order, with the user and the policy made
// before; the queue groups start, each led, once every node runs this
// build, and then a new queue lands in one of them, with the policy made
// before, while the old queue stays in the metadata group.
func TestUpgrade_RollingFromTheLandedRelease(t *testing.T) {
	if os.Getenv("RAFTMQ_E2E_RABBITMQ") != "" {
		t.Skip("upgrades raftmq nodes: raftmq only")
	}
	skipShort(t)
	old := releaseBinary(t, landedRelease)
	c := StartClusterWith(t, 3, func(_ int, n *Node) { n.Bin = old })
	ch := channel(t, dial(t, c.Nodes[0]))
	mustDeclare(t, ch, "up.q", nil)
	publishConfirmed(t, ch, "", "up.q", numbered(0, 100))
	ctl(t, c.Nodes[0], "add_user", "up-user", "up-secret")
	ctl(t, c.Nodes[0], "set_policy", "up-ttl", "^up\\.", `{"message-ttl":3600000}`, "--apply-to", "queues")

	sent := 100
	for i := range c.Nodes {
		upgradeNode(t, c, i, "--queue-groups", "3", "--place-queues")
		// The mixed cluster takes publishes through the upgraded node.
		publishConfirmed(t, channel(t, dial(t, c.Nodes[i])), "", "up.q", numbered(sent, sent+10))
		sent += 10
		t.Logf("%s upgraded: %d messages published so far", c.Nodes[i].ID, sent)
	}

	cons := channel(t, dial(t, c.Nodes[2]))
	d, err := cons.Consume("up.q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range receive(t, d, sent, 60*time.Second) {
		if string(m.Body) != fmt.Sprint(i) || m.Redelivered {
			t.Fatalf("message %d is %q (redelivered %v): lost, repeated or out of order across the upgrade", i, m.Body, m.Redelivered)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	expectNothing(t, d, 300*time.Millisecond)
	if users := ctl(t, c.Nodes[1], "list_users"); !strings.Contains(users, "up-user") {
		t.Fatalf("the user made before the upgrade is gone:\n%s", users)
	}
	if policies := ctl(t, c.Nodes[1], "list_policies", "name", "definition"); !strings.Contains(policies, "up-ttl") {
		t.Fatalf("the policy made before the upgrade is gone:\n%s", policies)
	}
	if err := Eventually(60*time.Second, func() error {
		for _, n := range c.Nodes {
			gs, err := groupsOn(t, n)
			if err != nil {
				return err
			}
			for _, id := range []string{"q1", "q2", "q3"} {
				if g, ok := gs[id]; !ok || g.Leader == "" || len(g.Members) != 3 {
					return fmt.Errorf("%s: group %s is %+v after the upgrade", n.ID, id, g)
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Placement is on once the groups run: a queue declared now lands in
	// a queue group and takes the policy made before the upgrade there.
	if err := Eventually(60*time.Second, func() error {
		ch := channel(t, dial(t, c.Nodes[0]))
		defer ch.Close()
		mustDeclare(t, ch, "up.new", nil)
		rows, err := queuesOn(t, c.Nodes[1])
		if err != nil {
			return err
		}
		if r, ok := rows["up.new"]; !ok || r.Group == metadataGroup {
			_, _ = ch.QueueDelete("up.new", false, false, false)
			return fmt.Errorf("up.new not placed yet: %+v", r)
		}
		if r, ok := rows["up.q"]; !ok || r.Group != metadataGroup {
			return fmt.Errorf("up.q, declared before the upgrade, moved: %+v", r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, channel(t, dial(t, c.Nodes[0])), "", "up.new", numbered(0, 20))
	d, err = channel(t, dial(t, c.Nodes[1])).Consume("up.new", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range receive(t, d, 20, 60*time.Second) {
		if string(m.Body) != fmt.Sprint(i) || m.Redelivered {
			t.Fatalf("message %d of up.new is %q (redelivered %v)", i, m.Body, m.Redelivered)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	if out := ctl(t, c.Nodes[2], "list_queues", "name", "policy", "raft_group"); !regexp.MustCompile(`up\.new\s+up-ttl\s+q[123]`).MatchString(out) {
		t.Fatalf("the placed queue does not show the policy made before the upgrade in its group:\n%s", out)
	}
}

// groupsRelease is the last release whose queue groups left every queue
// with its own x-expires in the metadata group (protocol level 23).
const groupsRelease = "c676c20"

// A cluster that already runs queue groups, upgraded in place one node at
// a time to this build: the placed queue keeps every message, exactly
// once and in order; while a node of the release runs, a queue declared
// with its own x-expires stays in the metadata group as the release
// placed it, so that old and new replicas place alike; once every node
// runs this build such a queue lands in a queue group and its lease ends
// it there, and the x-expires queues declared before stay where they
// were, with their messages.
func TestUpgrade_RollingAClusterWithQueueGroups(t *testing.T) {
	if os.Getenv("RAFTMQ_E2E_RABBITMQ") != "" {
		t.Skip("upgrades raftmq nodes: raftmq only")
	}
	skipShort(t)
	old := releaseBinary(t, groupsRelease)
	grouped := []string{"--queue-groups", "3", "--place-queues"}
	c := StartClusterWith(t, 3, func(_ int, n *Node) {
		n.Bin = old
		n.ExtraArgs = append(n.ExtraArgs, grouped...)
	})
	groupOf := func(name string) (string, error) {
		rows, err := queuesOn(t, c.Nodes[0])
		if err != nil {
			return "", err
		}
		r, ok := rows[name]
		if !ok {
			return "", fmt.Errorf("%s is not listed", name)
		}
		return r.Group, nil
	}
	mustBeIn := func(name string, inMetadata bool) {
		t.Helper()
		if err := Eventually(30*time.Second, func() error {
			g, err := groupOf(name)
			if err != nil {
				return err
			}
			if (g == metadataGroup) != inMetadata {
				return fmt.Errorf("%s is in group %q", name, g)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// declarePlaced declares name through n until the cluster places it
	// in a queue group (deleting it again meanwhile).
	declarePlaced := func(n *Node, name string, args amqp.Table) *amqp.Channel {
		t.Helper()
		var ch *amqp.Channel
		if err := Eventually(60*time.Second, func() error {
			ch = channel(t, dial(t, n))
			mustDeclare(t, ch, name, args)
			if g, err := groupOf(name); err != nil || g == metadataGroup {
				_, _ = ch.QueueDelete(name, false, false, false)
				return fmt.Errorf("%s not placed yet: %q %v", name, g, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return ch
	}
	long := amqp.Table{"x-expires": int32(600_000)}
	// Placement starts once the release's groups lead.
	ch := declarePlaced(c.Nodes[0], "gu.placed", nil)
	mustDeclare(t, ch, "gu.old", long)
	mustBeIn("gu.old", true)
	publishConfirmed(t, ch, "", "gu.placed", numbered(0, 100))
	publishConfirmed(t, ch, "", "gu.old", numbered(0, 5))

	sent := 100
	for i := range c.Nodes {
		upgradeNode(t, c, i)
		up := channel(t, dial(t, c.Nodes[i]))
		publishConfirmed(t, up, "", "gu.placed", numbered(sent, sent+10))
		sent += 10
		if i == 0 {
			// Two nodes of the release still run: the cluster places as
			// the release does.
			mustDeclare(t, up, "gu.mixed", long)
			mustBeIn("gu.mixed", true)
		}
		t.Logf("%s upgraded: %d messages published to gu.placed so far", c.Nodes[i].ID, sent)
	}

	// Every node runs this build: the protocol level rises, and a queue
	// with its own x-expires is placed, its lease run in its group.
	// 5 s: the listing that finds it placed must come before its lease
	// ends, on a loaded machine too.
	declarePlaced(c.Nodes[1], "gu.new", amqp.Table{"x-expires": int32(5000)})
	if err := Eventually(30*time.Second, func() error {
		if _, err := groupOf("gu.new"); err == nil {
			return fmt.Errorf("gu.new is still there after its x-expires")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mustBeIn("gu.old", true)
	mustBeIn("gu.mixed", true)

	cons := channel(t, dial(t, c.Nodes[2]))
	for _, q := range []struct {
		name string
		n    int
	}{{"gu.placed", sent}, {"gu.old", 5}} {
		d, err := cons.Consume(q.name, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range receive(t, d, q.n, 60*time.Second) {
			if string(m.Body) != fmt.Sprint(i) || m.Redelivered {
				t.Fatalf("%s: message %d is %q (redelivered %v): lost, repeated or out of order across the upgrade", q.name, i, m.Body, m.Redelivered)
			}
			if err := m.Ack(false); err != nil {
				t.Fatal(err)
			}
		}
		expectNothing(t, d, 300*time.Millisecond)
	}
}
