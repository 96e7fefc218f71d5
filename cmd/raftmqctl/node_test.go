package main

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/proto"
)

func TestRun_NodeVerbs(t *testing.T) {
	cases := []verbCase{
		{name: "status", args: []string{"status"}, stdout: `Runtime

OS PID: 4242
Uptime (seconds): 3723
raftmq version: v1.2.3
Node name: n1
Processors: 2
Goroutines: 97

Raft

Raft state: Leader (term 3, applied index 42)
Leader: n1
Cluster members: 2

Alarms

(none)

Memory

Total memory used: 0.0524 gb
Calculation strategy: rss
Memory high watermark setting: 0.4 of available memory, computed to: 0.0419 gb

File Descriptors

Total: 31, limit: 1048576

Free Disk Space

Low free disk space watermark: 1.0737 gb
Free disk space: 48.4131 gb

Listeners

Interface: 10.0.0.1, port: 5672, protocol: amqp, purpose: AMQP 0-9-1
Interface: 10.0.0.1, port: 5680, protocol: grpc, purpose: admin API (raftmqctl)
Interface: 10.0.0.1, port: 5681, protocol: raft, purpose: raft log replication between nodes
`, stderr: "Status of node localhost:5680 ...", request: &proto.ClusterStatusRequest{}},
		{name: "status json", args: []string{"status", "--formatter", "json"}, stdout: `{
  "alarms": [],
  "applied_index": 42,
  "disk_free": 48413100000,
  "disk_free_limit": 1073741824,
  "file_descriptors": {
    "total_limit": 1048576,
    "total_used": 31
  },
  "goroutines": 97,
  "leader_addr": "10.0.0.1:5681",
  "leader_id": "n1",
  "listeners": [
    {
      "protocol": "amqp",
      "address": "10.0.0.1:5672"
    },
    {
      "protocol": "grpc",
      "address": "10.0.0.1:5680"
    },
    {
      "protocol": "raft",
      "address": "10.0.0.1:5681"
    }
  ],
  "members": [
    "n1",
    "n2"
  ],
  "memory": {
    "strategy": "rss",
    "total": {
      "rss": 52428800
    }
  },
  "node_id": "n1",
  "pid": 4242,
  "processors": 2,
  "raft_state": "Leader",
  "raftmq_version": "v1.2.3",
  "term": 3,
  "uptime": 3723,
  "vm_memory_high_watermark_limit": 41943040,
  "vm_memory_high_watermark_setting": {
    "relative": 0.4
  }
}
`},
		{name: "ping", args: []string{"ping"}, stdout: "Ping succeeded\n"},
		{name: "await_startup", args: []string{"await_startup", "-q"}, stdout: "Node n1 is ready\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runCase(t, &fakeAdmin{}, tc) })
	}
}

// status names each raised alarm as rabbitmqctl does, and shows the
// memory the memory alarm compares beside its limit.
func TestRun_StatusAlarms(t *testing.T) {
	alarmed := &statusAdmin{st: &proto.ClusterStatusResponse{NodeId: "n1", LeaderId: "n1", Alarms: []string{"disk", "memory"},
		MemUsed: 1500000000, MemLimit: 1000000000}}
	code, out, errs := runErr(t, alarmed, "status")
	for _, want := range []string{"\nAlarms\n\nFree disk space alarm on node n1\nMemory alarm on node n1\n\nMemory\n\n" +
		"Total memory used: 1.5000 gb\nCalculation strategy: rss\nMemory high watermark setting: 1.0000 gb, computed to: 1.0000 gb\n"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Fatalf("exit %d, stdout lacks %q:\n%s%s", code, want, out, errs)
		}
	}
}

func TestRun_PingFails(t *testing.T) {
	// A node that answers with an error, or cannot be reached, is 69.
	runCase(t, &fakeAdmin{err: status.Error(codes.Unauthenticated, "bad password")},
		verbCase{args: []string{"ping"}, code: exitUnavailable, stderr: "ping of localhost:5680 failed: bad password"})
	var out, errb bytes.Buffer
	code := runWith([]string{"--node", "127.0.0.1:1", "-t", "5", "ping"}, &out, &errb, dialNode)
	if code != exitUnavailable || !strings.Contains(errb.String(), "ping of 127.0.0.1:1 failed") {
		t.Fatalf("ping of a closed port: exit %d, %q", code, errb.String())
	}
}

// startingAdmin is a node that has no leader for its first calls, then
// has one but has applied nothing, then is ready.
type startingAdmin struct {
	fakeAdmin
	calls atomic.Int32
}

func (s *startingAdmin) ClusterStatus(ctx context.Context, r *proto.ClusterStatusRequest) (*proto.ClusterStatusResponse, error) {
	switch n := s.calls.Add(1); {
	case n == 1:
		return nil, status.Error(codes.Unavailable, "starting")
	case n == 2:
		return &proto.ClusterStatusResponse{NodeId: "n3", RaftState: "Follower"}, nil
	case n == 3:
		return &proto.ClusterStatusResponse{NodeId: "n3", RaftState: "Follower", LeaderId: "n1"}, nil
	default:
		return &proto.ClusterStatusResponse{NodeId: "n3", RaftState: "Follower", LeaderId: "n1", AppliedIndex: 7}, nil
	}
}

func TestRun_AwaitStartup(t *testing.T) {
	old := awaitPoll
	awaitPoll = 10 * time.Millisecond
	t.Cleanup(func() { awaitPoll = old })

	fake := &startingAdmin{}
	dial, _ := startFake(t, fake)
	var out, errb bytes.Buffer
	if code := run([]string{"await_startup"}, &out, &errb, dial); code != exitOK || out.String() != "Node n3 is ready\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if n := fake.calls.Load(); n != 4 {
		t.Fatalf("ready after %d calls, want 4", n)
	}

	// A node that never gets ready: 69 once -t runs out, with the reason.
	never := &fakeAdmin{err: status.Error(codes.Unavailable, "no leader is known")}
	dial, _ = startFake(t, never)
	out.Reset()
	errb.Reset()
	start := time.Now()
	code := run([]string{"await_startup", "-t", "0.3"}, &out, &errb, dial)
	if code != exitUnavailable || !strings.Contains(errb.String(), "did not start within 300ms: no leader is known") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Fatalf("await_startup -t 0.3 took %v", d)
	}
}

// quorumAdmin lists a queue declared with x-queue-type.
type quorumAdmin struct{ fakeAdmin }

func (q *quorumAdmin) ListQueues(_ context.Context, r *proto.ListQueuesRequest) (*proto.ListQueuesResponse, error) {
	return &proto.ListQueuesResponse{Queues: []*proto.QueueInfo{
		{Vhost: "/", Name: "q1", Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-queue-type", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("quorum")}}}}}},
		{Vhost: "/", Name: "c1"},
	}}, nil
}

// runOn runs args against fake and returns the exit code and stdout.
func runOn(t *testing.T, fake proto.AdminServer, args ...string) (int, string) {
	t.Helper()
	dial, _ := startFake(t, fake)
	var out, errb bytes.Buffer
	code := run(args, &out, &errb, dial)
	return code, out.String()
}

func TestRun_ListQueuesRaftColumns(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list_queues", "name", "type", "state", "leader", "members"},
			"name  type     state    leader  members\nq1    quorum   running  n1      [\"n1\",\"n2\"]\nc1    classic  running  n1      [\"n1\",\"n2\"]\n"},
		{[]string{"--json", "list_queues", "name", "members"},
			"[\n  {\n    \"members\": [\n      \"n1\",\n      \"n2\"\n    ],\n    \"name\": \"q1\"\n  },\n  {\n    \"members\": [\n      \"n1\",\n      \"n2\"\n    ],\n    \"name\": \"c1\"\n  }\n]\n"},
	} {
		if code, out := runOn(t, &quorumAdmin{}, tc.args...); code != exitOK || out != tc.want {
			t.Fatalf("%v: exit %d\n%s\nwant\n%s", tc.args, code, out, tc.want)
		}
	}
	// Without leader or members, ClusterStatus is not called.
	fake := &fakeAdmin{}
	runCase(t, fake, verbCase{args: []string{"list_queues", "name", "type"},
		stdout: "name                      type\norders                    classic\na-much-longer-queue-name  classic\n"})
	if _, ok := fake.lastRequest().(*proto.ClusterStatusRequest); ok {
		t.Fatal("list_queues without leader or members asked for the cluster status")
	}
}

func TestRun_ListChannels(t *testing.T) {
	runCase(t, &fakeAdmin{}, verbCase{args: []string{"list_channels"},
		stdout: "pid        user   consumer_count  messages_unacknowledged\n<n1.c7.1>  guest  1               2\n<n2.c1.1>  app    1               0\n",
		stderr: "Listing channels ...", request: &proto.ListRequest{}})
	runCase(t, &fakeAdmin{}, verbCase{args: []string{"list_channels", "node", "connection", "number"},
		stdout: "node  connection  number\nn1    c7          1\nn2    c1          1\n"})
	runCase(t, &fakeAdmin{}, verbCase{args: []string{"list_channels", "connection", "vhost", "peer"},
		stdout: "connection  vhost  peer\nc7          /      10.0.0.9:40000\nc1          prod   10.0.0.8:40001\n"})
}
