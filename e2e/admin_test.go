package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ctl runs raftmqctl against node n and returns its stdout; it fails the
// test on a non-zero exit.
func ctl(t *testing.T, n *Node, args ...string) string {
	t.Helper()
	out, errOut, code := ctlRun(t, n, args...)
	if code != 0 {
		t.Fatalf("raftmqctl %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

func ctlRun(t *testing.T, n *Node, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	// Run as the node's OS user, raftmqctl proves itself with the admin
	// secret of the node's data dir.
	cmd := exec.Command(CtlBinary(t), append([]string{"--node", n.GRPCAddr, "--data-dir", n.DataDir}, args...)...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("raftmqctl: %v", err)
	}
	return o.String(), e.String(), code
}

// follower returns a node that is not the leader, from cluster_status.
func follower(t *testing.T, c *Cluster) *Node {
	t.Helper()
	var st struct {
		LeaderID string `json:"leader_id"`
	}
	err := Eventually(20*time.Second, func() error {
		if err := json.Unmarshal([]byte(ctl(t, c.Nodes[0], "--json", "cluster_status")), &st); err != nil {
			return err
		}
		if st.LeaderID == "" {
			return errors.New("no leader yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if n.ID != st.LeaderID {
			return n
		}
	}
	t.Fatal("every node is the leader")
	return nil
}

// gone waits until a mandatory publish to queue comes back unroutable (the
// queue was deleted); publishing does not renew a queue's lease.
func gone(t *testing.T, ch *amqp.Channel, queue string, timeout time.Duration) error {
	t.Helper()
	returns := ch.NotifyReturn(make(chan amqp.Return, 64))
	return Eventually(timeout, func() error {
		if err := ch.PublishWithContext(context.Background(), "", queue, true, false, amqp.Publishing{Body: []byte("?")}); err != nil {
			return err
		}
		select {
		case <-returns:
			return nil
		case <-time.After(100 * time.Millisecond):
			return fmt.Errorf("queue %s still routable", queue)
		}
	})
}

func TestAdmin_PolicyThroughFollowerAppliesToExistingAndNewQueues(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	f := follower(t, c)
	ch := channel(t, dial(t, c.Nodes[0]))
	obs := channel(t, dial(t, c.Nodes[2]))
	declareDeadLetters(t, ch, "pol-old", time.Minute, "pdlx", "pdead")
	dead, err := obs.Consume("pdead", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "", "pol-old", []amqp.Publishing{{Body: []byte("old")}})

	// seeds/000: rabbitmqctl set_policy TTL ".*" '{"message-ttl":60000}'
	// --apply-to queues; the lower of policy and argument wins, and a
	// policy applies to messages already queued.
	ctl(t, f, "set_policy", "TTL", "^pol-", `{"message-ttl":1000}`, "--apply-to", "queues")
	if m := receive(t, dead, 1, 10*time.Second)[0]; string(m.Body) != "old" {
		t.Fatalf("dead-lettered %q, want the message queued before the policy", m.Body)
	}
	args := amqp.Table{"x-message-ttl": int32(60000), "x-dead-letter-exchange": "pdlx"}
	mustDeclare(t, ch, "pol-new", args)
	start := time.Now()
	publishConfirmed(t, ch, "", "pol-new", []amqp.Publishing{{Body: []byte("new")}})
	m := receive(t, dead, 1, 10*time.Second)[0]
	if el := elapsed(start); string(m.Body) != "new" || el < 900*time.Millisecond || el > 5*time.Second {
		t.Fatalf("%q died after %v, want about 1 s (the policy's TTL)", m.Body, el)
	}
	out := ctl(t, c.Nodes[2], "--consistent", "list_queues", "name", "policy", "effective_message_ttl")
	if !strings.Contains(out, "pol-new") || !strings.Contains(out, "TTL") || !strings.Contains(out, "1000") {
		t.Fatalf("list_queues does not show the policy:\n%s", out)
	}

	// Clearing the policy restores the argument's 60 s TTL.
	ctl(t, f, "clear_policy", "TTL")
	publishConfirmed(t, ch, "", "pol-new", []amqp.Publishing{{Body: []byte("kept")}})
	expectNothing(t, dead, 2*time.Second)
	q, err := ch.QueueDeclarePassive("pol-new", true, false, false, false, args)
	if err != nil || q.Messages != 1 {
		t.Fatalf("after clear_policy: %+v %v, want the message still queued", q, err)
	}

	// The same for expires: the lower of policy and x-expires wins.
	mustDeclare(t, ch, "exp-a", amqp.Table{"x-expires": int32(60000)})
	ctl(t, f, "set_policy", "EXP", "^exp-", `{"expires":1000}`, "--apply-to", "queues")
	probe := channel(t, dial(t, c.Nodes[1]))
	if err := gone(t, probe, "exp-a", 10*time.Second); err != nil {
		t.Fatalf("expires policy: %v", err)
	}
	ctl(t, f, "clear_policy", "EXP")
	mustDeclare(t, ch, "exp-b", amqp.Table{"x-expires": int32(60000)})
	if err := gone(t, probe, "exp-b", 2500*time.Millisecond); err == nil {
		t.Fatal("exp-b was deleted although the expires policy was cleared")
	}
}

func TestAdmin_EveryVerbThroughAFollower(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	f := follower(t, c)
	ch := channel(t, dial(t, c.Nodes[0]))
	mustDeclare(t, ch, "adm-q", amqp.Table{"x-message-ttl": int32(60000)})
	if err := ch.QueueBind("adm-q", "adm-key", "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "", "adm-q", []amqp.Publishing{{Body: []byte("1")}, {Body: []byte("2")}})
	cons := channel(t, dial(t, c.Nodes[2]))
	if _, err := cons.Consume("adm-q", "ctag-1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	type check struct {
		args []string
		want []string // substrings of stdout
	}
	for _, tc := range []check{
		{[]string{"cluster_status"}, []string{"n1", "n2", "n3", "voter"}},
		{[]string{"--consistent", "list_queues", "name", "messages", "consumers"}, []string{"adm-q"}},
		{[]string{"list_exchanges"}, []string{"amq.topic"}},
		{[]string{"--consistent", "list_bindings"}, []string{"amq.direct", "adm-q", "adm-key"}},
		{[]string{"--consistent", "list_consumers"}, []string{"ctag-1"}},
		{[]string{"list_connections"}, []string{"n1", "n3"}},
		{[]string{"add_vhost", "v2"}, nil},
		{[]string{"--consistent", "list_vhosts"}, []string{"v2"}},
		{[]string{"add_user", "alice", "s3cret"}, nil},
		{[]string{"set_user_tags", "alice", "monitoring"}, nil},
		{[]string{"set_permissions", "-p", "v2", "alice", ".*", ".*", ".*"}, nil},
		{[]string{"--consistent", "list_users"}, []string{"alice", "monitoring"}},
		{[]string{"--consistent", "list_permissions", "-p", "v2"}, []string{"alice"}},
		{[]string{"change_password", "alice", "n3w"}, nil},
		{[]string{"set_operator_policy", "cap", ".*", `{"max-length":100}`, "--apply-to", "queues"}, nil},
		{[]string{"--consistent", "list_operator_policies"}, []string{"cap"}},
		{[]string{"clear_operator_policy", "cap"}, nil},
		{[]string{"clear_permissions", "-p", "v2", "alice"}, nil},
		{[]string{"delete_user", "alice"}, nil},
		{[]string{"delete_vhost", "v2"}, nil},
		{[]string{"digest"}, nil},
	} {
		out := ctl(t, f, tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Fatalf("raftmqctl %v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	// The new password works over AMQP only while the user exists; the
	// deleted user is refused.
	if _, err := amqp.Dial("amqp://alice:n3w@" + c.Nodes[1].AMQPAddr + "/"); err == nil {
		t.Fatal("a deleted user could log in")
	}
	if _, errOut, code := ctlRun(t, f, "purge_queue", "no-such-queue"); code != 1 || !strings.Contains(errOut, "no-such-queue") {
		t.Fatalf("purge of a missing queue: exit %d %s", code, errOut)
	}
	// 64 is EX_USAGE, what rabbitmqctl exits with for a usage error.
	if _, _, code := ctlRun(t, f, "no_such_verb"); code != 64 {
		t.Fatalf("unknown verb: exit %d, want 64", code)
	}
	if err := cons.Cancel("ctag-1", false); err != nil {
		t.Fatal(err)
	}
	if err := cons.Close(); err != nil { // requeues the delivered messages
		t.Fatal(err)
	}
	if out := ctl(t, f, "purge_queue", "adm-q"); !strings.Contains(out, "2") {
		t.Fatalf("purge_queue: %q, want 2 messages purged", out)
	}
	ctl(t, f, "delete_queue", "adm-q")
	if out := ctl(t, f, "--consistent", "list_queues"); strings.Contains(out, "adm-q") {
		t.Fatalf("adm-q still listed:\n%s", out)
	}

	// close_connection reaches the node a connection lives on, wherever
	// it is asked.
	victim := dial(t, c.Nodes[2])
	closed := victim.NotifyClose(make(chan *amqp.Error, 1))
	var conns []struct {
		Node string `json:"node"`
		ID   string `json:"id"`
	}
	if err := json.Unmarshal([]byte(ctl(t, f, "--json", "list_connections", "node", "id")), &conns); err != nil {
		t.Fatal(err)
	}
	for _, cn := range conns {
		if cn.Node == c.Nodes[2].ID {
			ctl(t, c.Nodes[0], "close_connection", cn.Node, cn.ID, "test")
		}
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced {
			t.Fatalf("closed with %v, want 320 CONNECTION_FORCED", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("close_connection did not close the client's connection")
	}

	// Leadership moves on request, and every node agrees on the state.
	ctl(t, f, "transfer_leadership", f.ID)
	err := Eventually(20*time.Second, func() error {
		out := ctl(t, c.Nodes[0], "--json", "cluster_status")
		if !strings.Contains(out, `"leader_id":"`+f.ID+`"`) && !strings.Contains(out, `"leader_id": "`+f.ID+`"`) {
			return fmt.Errorf("leader is not %s yet: %s", f.ID, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	assertSameDigest(t, c)

	// A stopped node is forgotten on request; the rest go on.
	gone := c.Nodes[2]
	if gone.ID == f.ID {
		gone = c.Nodes[1]
	}
	for i, n := range c.Nodes {
		if n == gone {
			c.Stop(i)
		}
	}
	ctl(t, f, "forget_cluster_node", gone.ID)
	var st struct {
		Nodes []struct {
			ID       string `json:"id"`
			Suffrage string `json:"suffrage"`
		} `json:"nodes"`
	}
	out := ctl(t, f, "--json", "cluster_status")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	voters := 0
	for _, n := range st.Nodes {
		if n.Suffrage == "voter" {
			voters++
			if n.ID == gone.ID {
				t.Fatalf("%s still a voter after forget_cluster_node:\n%s", gone.ID, out)
			}
		}
	}
	if voters != 2 {
		t.Fatalf("%d voters after forgetting one of three:\n%s", voters, out)
	}
	ch2 := channel(t, dial(t, f))
	mustDeclare(t, ch2, "after-forget", nil)
}

// assertSameDigest waits until every node reports the same digest at the
// same applied index.
func assertSameDigest(t *testing.T, c *Cluster) {
	t.Helper()
	err := Eventually(20*time.Second, func() error {
		var first string
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			out := strings.TrimSpace(ctl(t, n, "digest"))
			f := strings.Fields(out)
			if len(f) < 2 {
				return fmt.Errorf("digest output %q", out)
			}
			got := strings.Join(f[1:], " ")
			if first == "" {
				first = got
			} else if got != first {
				return fmt.Errorf("digests differ: %q vs %q", first, got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// scrape returns the value of an unlabelled metric on node n.
func scrape(t *testing.T, n *Node, metric string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, metric+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, metric)), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("metric %s not found on %s", metric, n.ID)
	return 0
}

func TestMetrics_MoveUnderLoad(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	n := c.Nodes[1]
	before := map[string]float64{}
	counters := []string{"raftmq_messages_published_total", "raftmq_messages_delivered_total",
		"raftmq_messages_acked_total", "raftmq_messages_expired_total", "raftmq_raft_applied_index"}
	for _, m := range counters {
		before[m] = scrape(t, n, m)
	}
	ch := channel(t, dial(t, n))
	mustDeclare(t, ch, "met", nil)
	mustDeclare(t, ch, "met-ttl", amqp.Table{"x-message-ttl": int32(100)})
	msgs := make([]amqp.Publishing, 50)
	for i := range msgs {
		msgs[i] = amqp.Publishing{Body: []byte("m")}
	}
	publishConfirmed(t, ch, "", "met", msgs)
	publishConfirmed(t, ch, "", "met-ttl", msgs[:10])
	d, err := ch.Consume("met", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range receive(t, d, 50, 20*time.Second) {
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	if got := scrape(t, n, "raftmq_connections"); got < 1 {
		t.Fatalf("raftmq_connections = %v with a client connected", got)
	}
	err = Eventually(10*time.Second, func() error {
		for _, m := range counters {
			if after := scrape(t, n, m); after <= before[m] {
				return fmt.Errorf("%s did not move: %v -> %v", m, before[m], after)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, n, "raftmq_messages_published_total") - before["raftmq_messages_published_total"]; got < 60 {
		t.Fatalf("published moved by %v, want at least 60", got)
	}
}

func TestAccess_PermissionsAndPasswordsAcrossNodes(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	f := follower(t, c)
	ctl(t, f, "add_user", "bob", "b0b")
	ctl(t, f, "set_permissions", "bob", ".*", "^$", ".*") // configure and read, no write
	url := func(n *Node, pass string) string { return "amqp://bob:" + pass + "@" + n.AMQPAddr + "/" }

	_, err := amqp.Dial(url(c.Nodes[2], "wrong"))
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
		t.Fatalf("wrong password: %v, want 403 ACCESS_REFUSED", err)
	}
	var conn *amqp.Connection
	if err := Eventually(10*time.Second, func() error { // the user reaches every node's state
		cn, err := amqp.Dial(url(c.Nodes[2], "b0b"))
		conn = cn
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.PublishWithContext(context.Background(), "amq.direct", "k", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.AccessRefused {
			t.Fatalf("publish without write permission closed the channel with %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("publish without write permission was not refused")
	}
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatalf("the connection did not survive the channel error: %v", err)
	}
	if _, err := ch2.QueueDeclare("bob-q", false, false, false, false, nil); err != nil {
		t.Fatalf("declare with configure permission: %v", err)
	}
}

// Deleting a vhost closes every connection to it, on every node, and
// deleting a user every connection of that user, with 320
// CONNECTION_FORCED and the reason RabbitMQ gives; other connections stay.
// On queue groups: the vhost's queues live in them, and the groups apply
// the vhost's delete too.
func TestAccess_DeletingAVhostOrAUserClosesItsConnections(t *testing.T) {
	skipShort(t)
	c := placed3.start(t)
	n := c.Nodes[0]
	ctl(t, n, "add_vhost", "v2")
	ctl(t, n, "add_user", "carol", "c4r0l")
	ctl(t, n, "set_permissions", "-p", "v2", "guest", ".*", ".*", ".*")
	ctl(t, n, "set_permissions", "carol", ".*", ".*", ".*")
	dial := func(url string) (*amqp.Connection, <-chan *amqp.Error) {
		t.Helper()
		var conn *amqp.Connection
		if err := Eventually(10*time.Second, func() error { // the grants reach every node's state
			cn, err := amqp.Dial(url)
			conn = cn
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn, conn.NotifyClose(make(chan *amqp.Error, 1))
	}
	var inV2, ofCarol []<-chan *amqp.Error
	for i, node := range c.Nodes {
		conn, closed := dial("amqp://guest:guest@" + node.AMQPAddr + "/v2")
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		q := fmt.Sprintf("v2-q%d", i)
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.Consume(q, "", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		inV2 = append(inV2, closed)
		_, closed = dial("amqp://carol:c4r0l@" + node.AMQPAddr + "/")
		ofCarol = append(ofCarol, closed)
	}
	other, otherClosed := dial(n.AMQPURL())
	ended := func(what string, chans []<-chan *amqp.Error, reason string) {
		t.Helper()
		for i, closed := range chans {
			select {
			case e := <-closed:
				if e == nil || e.Code != amqp.ConnectionForced || e.Reason != reason {
					t.Fatalf("%s on %s closed with %v, want 320 %q", what, c.Nodes[i].ID, e, reason)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s on %s still open 10 s after the delete", what, c.Nodes[i].ID)
			}
		}
	}
	open := func(what string, chans ...<-chan *amqp.Error) {
		t.Helper()
		for _, closed := range chans {
			select {
			case e := <-closed:
				t.Fatalf("%s closed: %v", what, e)
			default:
			}
		}
	}

	ctl(t, n, "delete_vhost", "v2")
	ended("a connection to v2", inV2, "CONNECTION_FORCED - vhost 'v2' is deleted")
	open("a connection of carol's", ofCarol...)
	ctl(t, c.Nodes[1], "delete_user", "carol")
	ended("a connection of carol's", ofCarol, "CONNECTION_FORCED - user 'carol' is deleted")
	open("guest's connection to /", otherClosed)
	ch, err := other.Channel()
	if err != nil {
		t.Fatalf("guest's connection to /: %v", err)
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatalf("guest's connection to /: %v", err)
	}
}
