package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitmqadmin runs Debian's rabbitmqadmin (package rabbitmq-server)
// against a node's management API and returns its output.
func rabbitmqadmin(t *testing.T, bin string, n *Node, args ...string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(n.ManagementAddr)
	if err != nil {
		t.Fatal(err)
	}
	full := append([]string{"-H", host, "-P", port, "-u", "guest", "-p", "guest"}, args...)
	out, err := exec.Command(bin, full...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqadmin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// followerOf asks a node's management API which node leads and returns a
// node that does not.
func followerOf(t *testing.T, c *Cluster) *Node {
	t.Helper()
	var follower *Node
	err := Eventually(30*time.Second, func() error {
		req, _ := http.NewRequest("GET", "http://"+c.Nodes[0].ManagementAddr+"/api/nodes", nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var nodes []struct {
			Name   string `json:"name"`
			Leader bool   `json:"raft_leader"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&nodes); err != nil {
			return err
		}
		leader := ""
		for _, n := range nodes {
			if n.Leader {
				leader = n.Name
			}
		}
		if leader == "" || len(nodes) != len(c.Nodes) {
			return fmt.Errorf("nodes %v: no leader yet", nodes)
		}
		for _, n := range c.Nodes {
			if n.ID != leader {
				follower = n
				return nil
			}
		}
		return fmt.Errorf("no follower among %v", nodes)
	})
	if err != nil {
		t.Fatal(err)
	}
	return follower
}

// TestRabbitmqadminThroughFollower drives a three-node cluster with the
// real rabbitmqadmin through a follower's management port: declares,
// lists, publishes, gets, then imports RabbitMQ 3.10.8's definitions,
// logs in over AMQP as their users and exports the same topology back.
func TestRabbitmqadminThroughFollower(t *testing.T) {
	bin, err := exec.LookPath("rabbitmqadmin")
	if err != nil {
		t.Skip("rabbitmqadmin not found (Debian's rabbitmq-server package provides /usr/bin/rabbitmqadmin)")
	}
	c := StartCluster(t, 3)
	f := followerOf(t, c)
	admin := func(args ...string) string { return rabbitmqadmin(t, bin, f, args...) }

	admin("declare", "queue", "name=q1", "durable=true")
	if out := admin("list", "queues"); !strings.Contains(out, "| q1 ") {
		t.Fatalf("list queues lacks q1:\n%s", out)
	}
	admin("publish", "routing_key=q1", "payload=hello")
	if out := admin("get", "queue=q1", "ackmode=ack_requeue_false"); !strings.Contains(out, "hello") {
		t.Fatalf("get did not return the message:\n%s", out)
	}
	if out := admin("get", "queue=q1", "ackmode=ack_requeue_false"); strings.Contains(out, "hello") {
		t.Fatalf("ack_requeue_false left the message in the queue:\n%s", out)
	}
	admin("declare", "exchange", "name=x1", "type=topic")
	admin("declare", "binding", "source=x1", "destination=q1", "routing_key=a.#")
	admin("publish", "exchange=x1", "routing_key=a.b", "payload=routed")
	for _, tc := range []struct{ what, want string }{
		{"exchanges", "| x1 "}, {"bindings", "| x1 "}, {"bindings", "a.#"}, {"users", "guest"}, {"vhosts", "| / "},
	} {
		if out := admin("list", tc.what); !strings.Contains(out, tc.want) {
			t.Fatalf("list %s lacks %q:\n%s", tc.what, tc.want, out)
		}
	}
	if out := admin("list", "queues"); !regexp.MustCompile(`\|\s*q1\s*\|\s*1\s*\|`).MatchString(out) {
		t.Fatalf("list queues does not show the routed message in q1:\n%s", out)
	}
	admin("purge", "queue", "name=q1")
	admin("delete", "binding", "source=x1", "destination_type=queue", "destination=q1", "properties_key=a.%23")
	if out := admin("list", "bindings"); strings.Contains(out, "a.#") {
		t.Fatalf("binding left after delete:\n%s", out)
	}
	admin("delete", "queue", "name=q1")
	admin("delete", "exchange", "name=x1")

	// Connections of every node are listed, and closed on their node.
	conn, err := amqp.Dial(c.Nodes[2].AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("watched", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("watched", "watcher", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := Eventually(10*time.Second, func() error {
		out := admin("-f", "tsv", "-q", "list", "connections", "name")
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "-> "+c.Nodes[2].ID+"/") {
				name = strings.TrimSpace(l)
				return nil
			}
		}
		return fmt.Errorf("no connection of %s in:\n%s", c.Nodes[2].ID, out)
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, want string }{
		{"consumers", "watcher"}, {"channels", name + " (1)"}, {"nodes", c.Nodes[2].ID}, {"permissions", "guest"},
	} {
		if out := admin("list", tc.what); !strings.Contains(out, tc.want) {
			t.Fatalf("list %s lacks %q:\n%s", tc.what, tc.want, out)
		}
	}
	if out := admin("show", "overview"); !strings.Contains(out, "3.10.8") {
		t.Fatalf("show overview:\n%s", out)
	}
	admin("close", "connection", "name="+name)
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced {
			t.Fatalf("connection closed with %v, want 320 CONNECTION_FORCED", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("close connection did not close the client's connection")
	}

	// RabbitMQ's own export imports through the follower.
	defsFile := filepath.Join("..", "api", "mgmt", "testdata", "rabbitmq-3.10.8", "definitions.json")
	admin("import", defsFile)
	for _, u := range []struct{ user, pass, vhost string }{{"ops", "0ps", ""}, {"alice", "s3cret", "orders"}, {"guest", "guest", "orders"}} {
		conn, err := amqp.Dial("amqp://" + u.user + ":" + u.pass + "@" + c.Nodes[2].AMQPAddr + "/" + u.vhost)
		if err != nil {
			t.Fatalf("%s cannot log in over AMQP with its RabbitMQ password: %v", u.user, err)
		}
		_ = conn.Close()
	}
	exported := filepath.Join(t.TempDir(), "export.json")
	admin("export", exported)
	got, want := readTopology(t, exported), readTopology(t, defsFile)
	for k, w := range want {
		if strings.Join(got[k], "\n") != strings.Join(w, "\n") {
			t.Errorf("exported %s differ:\n got %v\nwant %v", k, got[k], w)
		}
	}

	// raftmqctl's verbs go through another node's management API.
	ctlFile := filepath.Join(t.TempDir(), "ctl.json")
	ctl(t, c.Nodes[2], "--management-url", "http://"+c.Nodes[2].ManagementAddr, "export_definitions", ctlFile)
	// x-max-priority, x-single-active-consumer and x-delivery-limit are
	// applied: importing raftmq's own export warns about none of them.
	if out := ctl(t, c.Nodes[0], "--management-url", "http://"+c.Nodes[0].ManagementAddr, "import_definitions", ctlFile); !strings.Contains(out, "Imported definitions") || strings.Contains(out, "x-max-priority") {
		t.Errorf("import_definitions:\n%s", out)
	}
	got = readTopology(t, ctlFile)
	for k, w := range want {
		if strings.Join(got[k], "\n") != strings.Join(w, "\n") {
			t.Errorf("raftmqctl export_definitions: %s differ:\n got %v\nwant %v", k, got[k], w)
		}
	}
}

// readTopology reads the definitions lists that must round-trip, each
// object as canonical JSON, sorted.
func readTopology(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, k := range []string{"users", "vhosts", "permissions", "policies", "queues", "exchanges", "bindings", "parameters"} {
		list, _ := d[k].([]any)
		var items []string
		for _, o := range list {
			m := o.(map[string]any)
			delete(m, "limits")
			j, _ := json.Marshal(m)
			items = append(items, string(j))
		}
		sort.Strings(items)
		out[k] = items
	}
	return out
}
