package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/proto"
)

// statusAdmin answers ClusterStatus with st.
type statusAdmin struct {
	fakeAdmin
	st *proto.ClusterStatusResponse
}

func (s *statusAdmin) ClusterStatus(context.Context, *proto.ClusterStatusRequest) (*proto.ClusterStatusResponse, error) {
	return s.st, nil
}

func runErr(t *testing.T, fake proto.AdminServer, args ...string) (int, string, string) {
	t.Helper()
	dial, _ := startFake(t, fake)
	var out, errb bytes.Buffer
	code := run(args, &out, &errb, dial)
	return code, out.String(), errb.String()
}

func TestRun_CheckRunning(t *testing.T) {
	code, out, errs := runErr(t, &fakeAdmin{}, "check_running")
	if code != exitOK || out != "raftmq on node n1 is fully booted and running\n" || !strings.Contains(errs, "Checking if raftmq is running") {
		t.Fatalf("running: exit %d, out %q, err %q", code, out, errs)
	}
	code, out, _ = runErr(t, &fakeAdmin{}, "--formatter", "json", "check_running")
	if code != exitOK || out != "{\n  \"message\": \"raftmq on node n1 is fully booted and running\"\n}\n" {
		t.Fatalf("json: exit %d, out %q", code, out)
	}
	for _, st := range []*proto.ClusterStatusResponse{
		{NodeId: "n3", RaftState: "Follower"},
		{NodeId: "n3", RaftState: "Follower", LeaderId: "n1"},
	} {
		code, out, errs = runErr(t, &statusAdmin{st: st}, "-q", "check_running")
		if code != exitUnavailable || out != "" || !strings.HasPrefix(errs, "Error:\nraftmq on node n3 is not running or has not fully booted yet: ") {
			t.Fatalf("%v: exit %d, out %q, err %q", st, code, out, errs)
		}
	}
}

func TestRun_CheckLocalAlarms(t *testing.T) {
	code, out, _ := runErr(t, &fakeAdmin{}, "check_local_alarms")
	if code != exitOK || out != "Node n1 reported no local alarms\n" {
		t.Fatalf("no alarms: exit %d, out %q", code, out)
	}
	alarmed := &statusAdmin{st: &proto.ClusterStatusResponse{NodeId: "n1", LeaderId: "n1", AppliedIndex: 5, Alarms: []string{"memory", "disk"}}}
	code, out, errs := runErr(t, alarmed, "-s", "check_local_alarms")
	if code != exitUnavailable || out != "" || errs != "Error:\nNode n1 reported local alarms: memory, disk\n" {
		t.Fatalf("alarms: exit %d, out %q, err %q", code, out, errs)
	}
	code, out, errs = runErr(t, alarmed, "--formatter", "json", "check_local_alarms")
	if code != exitUnavailable || !strings.Contains(out, `"result": "error"`) || errs != "" {
		t.Fatalf("alarms in json: exit %d, out %q, err %q", code, out, errs)
	}
}

func TestRun_CheckPortConnectivity(t *testing.T) {
	open := func() (net.Listener, string) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, l.Addr().String()
	}
	_, amqpAddr := open()
	_, grpcAddr := open()
	closed, raftAddr := open()
	_, amqpPort, _ := net.SplitHostPort(amqpAddr)
	st := &proto.ClusterStatusResponse{NodeId: "n1", LeaderId: "n1", AppliedIndex: 1, Nodes: []*proto.NodeStatus{
		// A listener on every interface is reached at --node's host.
		{Id: "n1", AmqpAddr: "0.0.0.0:" + amqpPort, GrpcAddr: grpcAddr, RaftAddr: raftAddr},
	}}
	code, out, errs := runErr(t, &statusAdmin{st: st}, "--node", "127.0.0.1:1", "check_port_connectivity")
	_, grpcPort, _ := net.SplitHostPort(grpcAddr)
	_, raftPort, _ := net.SplitHostPort(raftAddr)
	if want := "Successfully connected to ports " + amqpPort + ", " + grpcPort + ", " + raftPort + " on node n1.\n"; code != exitOK || out != want {
		t.Fatalf("all open: exit %d, out %q, err %q; want %q", code, out, errs, want)
	}
	closed.Close()
	code, out, errs = runErr(t, &statusAdmin{st: st}, "--node", "127.0.0.1:1", "check_port_connectivity")
	if code != exitUnavailable || out != "" || !strings.Contains(errs, raftAddr+" (raft)") || strings.Contains(errs, grpcAddr) {
		t.Fatalf("raft closed: exit %d, out %q, err %q", code, out, errs)
	}
}

func TestRun_Report(t *testing.T) {
	code, out, errs := runErr(t, &fakeAdmin{}, "report")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// Every section under its heading, per vhost for the vhost's listings,
	// in rabbitmqctl's order.
	last := -1
	for _, want := range []string{
		"Status of node localhost:5680 ...\nRuntime\n\nOS PID: 4242\n",
		"Cluster status of node localhost:5680 ...\nCluster status of node n1\n",
		"Listing connections ...\nnode  id  peer",
		"Listing channels ...\npid ",
		"Listing queues for vhost / ...\nname ",
		"Listing exchanges for vhost / ...\n",
		"Listing bindings for vhost / ...\n",
		"Listing permissions for vhost \"/\" ...\nuser ",
		"Listing policies for vhost \"/\" ...\n",
		"Listing queues for vhost prod ...\n",
		"Listing policies for vhost \"prod\" ...\n",
	} {
		i := strings.Index(out, want)
		if i < 0 || i < last {
			t.Fatalf("report lacks %q after offset %d:\n%s", want, last, out)
		}
		last = i
	}
	if strings.Contains(errs, "Listing queues") {
		t.Fatalf("section headings on stderr: %q", errs)
	}
	code, out, errs = runErr(t, &fakeAdmin{}, "--formatter", "json", "report")
	var doc struct {
		Status  map[string]any                        `json:"status"`
		Vhosts  map[string]map[string]json.RawMessage `json:"vhosts"`
		Channel []map[string]any                      `json:"channels"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != exitOK || err != nil {
		t.Fatalf("json: exit %d, %v, %s\n%s", code, err, errs, out)
	}
	if doc.Status["node_id"] != "n1" || len(doc.Vhosts["prod"]["queues"]) == 0 || len(doc.Channel) != 2 {
		t.Fatalf("json report: %s", out)
	}
}

func TestRun_Environment(t *testing.T) {
	code, out, errs := runErr(t, &fakeAdmin{}, "environment")
	if code != exitOK || out != "name            value\namqp-addr       :5672\ncluster-secret  <set>\n" || !strings.Contains(errs, "Application environment of node n1 ...") {
		t.Fatalf("exit %d, out %q, err %q", code, out, errs)
	}
}
