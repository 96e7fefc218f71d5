package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/raftmq/raftmq/api/grpcadmin"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// startClusterAdmin starts a single-node cluster and serves its Admin
// service on loopback; it returns the service's address.
func startClusterAdmin(t *testing.T) string {
	t.Helper()
	node := readyNode(t)
	return serveAdmin(t, ops.New(ops.Deps{Node: node}))
}

// readyNode starts a single-node cluster and returns it once the leader's
// defaults (the default vhost) are applied.
func readyNode(t *testing.T) ops.Node {
	t.Helper()
	c := clustertest.New(t, 1)
	node := ops.FromCluster(c.WaitForLeader(clustertest.Timeout))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		ready := false
		node.View(func(s ops.State) { ready = s.Initialized() })
		if !ready {
			return errors.New("defaults not applied yet")
		}
		return nil
	})
	return node
}

// serveAdmin serves svc as the Admin service on loopback and returns its
// address; opts configure the gRPC server (credentials, interceptors).
func serveAdmin(t *testing.T, svc *ops.Service, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	proto.RegisterAdminServer(srv, grpcadmin.New(svc))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func ctl(t *testing.T, addr string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runWith(append([]string{"--node", addr}, args...), &out, &errb, dialNode)
	return code, out.String(), errb.String()
}

func TestRun_AgainstSingleNodeCluster(t *testing.T) {
	addr := startClusterAdmin(t)

	code, out, errs := ctl(t, addr, "--json", "cluster_status")
	if code != exitOK {
		t.Fatalf("cluster_status exit %d: %s", code, errs)
	}
	var st struct {
		RaftState string `json:"raft_state"`
		Nodes     []struct {
			Suffrage string `json:"suffrage"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.RaftState != "Leader" || len(st.Nodes) != 1 || st.Nodes[0].Suffrage != "voter" {
		t.Fatalf("cluster_status %s (%v)", out, err)
	}
	if code, out, errs = ctl(t, addr, "digest"); code != exitOK || !strings.HasPrefix(out, "node0 ") {
		t.Fatalf("digest exit %d: %s %s", code, out, errs)
	}

	// Invalid input is refused before the log, whatever the state machine.
	code, _, errs = ctl(t, addr, "set_policy", "bad", ".*", `{"message-ttl":-5}`)
	if code != exitFailed || !strings.Contains(errs, "InvalidArgument") {
		t.Fatalf("invalid policy: exit %d %s", code, errs)
	}

	if code, _, errs = ctl(t, addr, "set_policy", "ttl", "^q$", `{"message-ttl":1000}`, "--apply-to", "queues"); code != exitOK {
		t.Fatalf("set_policy exit %d: %s", code, errs)
	}
	code, out, errs = ctl(t, addr, "--consistent", "list_policies", "name", "pattern", "definition")
	if code != exitOK || !strings.Contains(out, "ttl   ^q$") || !strings.Contains(out, `{"message-ttl":1000}`) {
		t.Fatalf("list_policies exit %d: %q %s", code, out, errs)
	}
	code, out, errs = ctl(t, addr, "--json", "list_queues", "name", "policy")
	if code != exitOK || !json.Valid([]byte(out)) {
		t.Fatalf("list_queues exit %d: %q %s", code, out, errs)
	}
	if code, out, errs = ctl(t, addr, "clear_policy", "ttl"); code != exitOK {
		t.Fatalf("clear_policy exit %d: %s %s", code, out, errs)
	}
	code, out, _ = ctl(t, addr, "list_policies", "name")
	if code != exitOK || out != "name\n" {
		t.Fatalf("after clear_policy: %q", out)
	}
}

// TestRun_NotFoundAsRabbitmqctl: a user or vhost that does not exist ends
// each verb with the text and exit code RabbitMQ 3.10.8's rabbitmqctl
// gives (measured against it); listing the queues, exchanges or consumers
// of a missing vhost is an empty listing there too.
func TestRun_NotFoundAsRabbitmqctl(t *testing.T) {
	addr := startClusterAdmin(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"delete_user", "nouser"}, 67, "Error:\nUser \"nouser\" does not exist\n"},
		{[]string{"change_password", "nouser", "x"}, 67, "Error:\nUser \"nouser\" does not exist\n"},
		{[]string{"set_user_tags", "nouser", "a"}, 67, "Error:\nUser \"nouser\" does not exist\n"},
		{[]string{"set_permissions", "nouser", ".*", ".*", ".*"}, 67, "Error:\nUser nouser does not exist\n"},
		{[]string{"set_permissions", "-p", "nosuch", "guest", ".*", ".*", ".*"}, 69, "Error:\nVirtual host nosuch does not exist\n"},
		{[]string{"clear_permissions", "nouser"}, 67, "Error:\nUser nouser does not exist\n"},
		{[]string{"delete_vhost", "nosuch"}, 65, "Virtual host 'nosuch' does not exist\n"},
		{[]string{"-q", "list_permissions", "-p", "nosuch"}, 65, "Virtual host 'nosuch' does not exist\n"},
		{[]string{"-q", "list_queues", "-p", "nosuch"}, 0, ""},
		{[]string{"-q", "list_exchanges", "-p", "nosuch"}, 0, ""},
		{[]string{"-q", "list_consumers", "-p", "nosuch"}, 0, ""},
		// A vhost without permissions still lists (none).
		{[]string{"-q", "--no-table-headers", "list_permissions", "-p", "empty"}, 0, ""},
	} {
		if tc.args[len(tc.args)-1] == "empty" {
			if code, _, errs := ctl(t, addr, "add_vhost", "empty"); code != exitOK {
				t.Fatalf("add_vhost: %d %s", code, errs)
			}
		}
		code, _, errs := ctl(t, addr, tc.args...)
		if code != tc.code || errs != tc.stderr {
			t.Errorf("%v: exit %d, stderr %q; want %d, %q", tc.args, code, errs, tc.code, tc.stderr)
		}
	}
}

// TestRun_GroupsOnThreeNodes: against the leader of a three-node
// cluster, list_queues shows the queue's group with its leader, members
// and online members; shrink and grow take a node out of the group and
// back, listing the queue as rabbitmq-queues does; rebalance lists what
// each node leads; with a node down, shrinking another is refused with
// the group's members unchanged.
func TestRun_GroupsOnThreeNodes(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.WaitForLeader(clustertest.Timeout)
	svc := ops.New(ops.Deps{Node: ops.FromCluster(leader)})
	t.Cleanup(func() { _ = svc.Close() })
	addr := serveAdmin(t, svc)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		_, err := svc.DeclareQueue(context.Background(), &proto.QueueDeclare{Vhost: "/", Name: "orders", Durable: true})
		return err
	})
	fs := c.Followers()
	l, f1, f2 := leader.NodeID(), fs[0].NodeID(), fs[1].NodeID()
	all := []string{l, f1, f2}
	slices.Sort(all)
	jsonList := func(ids ...string) string {
		b, _ := json.Marshal(ids)
		return string(b)
	}
	run := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		code, out, errs := ctl(t, addr, args...)
		if code != wantCode {
			t.Fatalf("%v: exit %d: %s %s", args, code, out, errs)
		}
		return out, errs
	}
	lines := func(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }
	fields := func(s string) string { return strings.Join(strings.Fields(s), " ") }

	clustertest.Eventually(t, clustertest.Timeout, func() error {
		out, _ := run(exitOK, "list_queues", "name", "raft_group", "leader", "members", "online")
		if got := lines(out); len(got) != 2 || fields(got[0]) != "name raft_group leader members online" ||
			fields(got[1]) != "orders metadata "+l+" "+jsonList(all...)+" "+jsonList(all...) {
			return fmt.Errorf("list_queues %q", out)
		}
		return nil
	})

	out, errs := run(exitOK, "shrink", f1)
	if got := lines(out); len(got) != 2 || fields(got[0]) != "vhost name size result" || fields(got[1]) != "/ orders 2 ok" ||
		!strings.Contains(errs, "Shrinking quorum queues on "+f1+"...") || !strings.Contains(errs, "Raft group metadata: 2 members, ok") {
		t.Fatalf("shrink: %q %q", out, errs)
	}
	two := []string{l, f2}
	slices.Sort(two)
	out, _ = run(exitOK, "list_queues", "name", "members")
	if got := lines(out); fields(got[1]) != "orders "+jsonList(two...) {
		t.Fatalf("members after shrink %q", out)
	}
	out, errs = run(exitOK, "grow", f1)
	if got := lines(out); len(got) != 2 || fields(got[1]) != "/ orders 3 ok" || !strings.Contains(errs, "Growing all quorum queues on "+f1+"...") {
		t.Fatalf("grow: %q %q", out, errs)
	}
	// A member already: nothing to grow, no queue listed.
	if out, _ = run(exitOK, "grow", f1, "all"); len(lines(out)) != 1 {
		t.Fatalf("grow of a member: %q", out)
	}

	out, errs = run(exitOK, "rebalance", "quorum")
	want := []string{"Node name Number of quorum queues Number of replicated classic queues Number of raft groups"}
	for _, id := range all {
		if id == l {
			want = append(want, id+" 0 1 1")
		} else {
			want = append(want, id+" 0 0 0")
		}
	}
	if got := lines(out); len(got) != 4 || fields(got[0]) != want[0] || fields(got[1]) != want[1] || fields(got[2]) != want[2] ||
		fields(got[3]) != want[3] || !strings.Contains(errs, "Re-balancing leaders of quorum queues...") {
		t.Fatalf("rebalance: %q %q, want %q", out, errs, want)
	}

	c.Kill(c.Index(f2))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		out, _ := run(exitOK, "list_groups", "name", "online")
		if got := lines(out); len(got) != 2 || strings.Contains(got[1], f2) {
			return fmt.Errorf("list_groups %q", out)
		}
		return nil
	})
	out, _ = run(exitOK, "shrink", f1, "--errors-only")
	if got := lines(out); len(got) != 2 ||
		fields(got[1]) != "/ orders 3 error: removing this member would leave fewer online members than a quorum" {
		t.Fatalf("shrink with a voter down: %q", out)
	}
	if out, _ = run(exitOK, "list_queues", "name", "members"); fields(lines(out)[1]) != "orders "+jsonList(all...) {
		t.Fatalf("members after a refused shrink %q", out)
	}
}
