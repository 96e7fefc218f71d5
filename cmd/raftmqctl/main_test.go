package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/proto"
)

type verbCase struct {
	name    string
	args    []string
	code    int
	stdout  string // exact, when want is checked
	stderr  string // substring
	request protobuf.Message
}

func runCase(t *testing.T, fake *fakeAdmin, tc verbCase) {
	t.Helper()
	dial, _ := startFake(t, fake)
	var out, errb bytes.Buffer
	code := run(tc.args, &out, &errb, dial)
	if code != tc.code {
		t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errb.String())
	}
	if tc.stdout != "" || tc.code == exitOK {
		if got := out.String(); got != tc.stdout {
			t.Fatalf("stdout:\n%s\nwant:\n%s", got, tc.stdout)
		}
	}
	if !strings.Contains(errb.String(), tc.stderr) {
		t.Fatalf("stderr %q does not contain %q", errb.String(), tc.stderr)
	}
	if tc.request != nil {
		if got := fake.lastRequest(); !protobuf.Equal(got, tc.request) {
			t.Fatalf("request %v, want %v", got, tc.request)
		}
	}
}

func TestRun_Verbs(t *testing.T) {
	cases := []verbCase{
		{name: "cluster_status", args: []string{"cluster_status"},
			stdout: `Cluster status of node n1
Leader: n1
Raft: state Leader, term 3, commit index 42, applied index 42, last log index 43
Log clock (unix ms): 1700000000000

node  raft_addr      grpc_addr      amqp_addr      health  suffrage  leader
n1    10.0.0.1:5681  10.0.0.1:5680  10.0.0.1:5672  alive   voter     true
n2    10.0.0.2:5681  10.0.0.2:5680  10.0.0.2:5672  alive   voter     false
`, request: &proto.ClusterStatusRequest{}},
		{name: "list_queues default", args: []string{"list_queues"},
			stdout:  "name                      messages\norders                    12\na-much-longer-queue-name  0\n",
			request: &proto.ListQueuesRequest{Vhost: "/"}},
		{name: "list_queues columns consistent vhost", args: []string{"-p", "prod", "list_queues", "name", "messages_ready", "messages_unacknowledged", "consumers", "policy", "effective_message_ttl", "arguments", "--consistent"},
			stdout: `name                      messages_ready  messages_unacknowledged  consumers  policy  effective_message_ttl  arguments
orders                    10              2                        1          ttl     60000                  {"x-message-ttl":60000}
a-much-longer-queue-name  0               0                        0                  -1                     {}
`, request: &proto.ListQueuesRequest{Vhost: "prod", Consistent: true}},
		{name: "list_queues bytes", args: []string{"list_queues", "name", "message_bytes", "message_bytes_ready", "message_bytes_unacknowledged", "messages_persistent", "head_message_timestamp"},
			// An empty last column is padded like any other.
			stdout: "name                      message_bytes  message_bytes_ready  message_bytes_unacknowledged  messages_persistent  head_message_timestamp\n" +
				"orders                    120            100                  20                            0" + strings.Repeat(" ", 20) + "\n" +
				"a-much-longer-queue-name  0              0                    0                             0" + strings.Repeat(" ", 20) + "\n"},
		{name: "list_queues json", args: []string{"--json", "list_queues", "name", "messages", "earliest_deadline"},
			stdout: `[
  {
    "earliest_deadline": 1700000060000,
    "messages": 12,
    "name": "orders"
  },
  {
    "earliest_deadline": 0,
    "messages": 0,
    "name": "a-much-longer-queue-name"
  }
]
`},
		{name: "list_exchanges", args: []string{"list_exchanges"},
			stdout: "name       type\n           direct\namq.topic  topic\n", request: &proto.ListRequest{Vhost: "/"}},
		{name: "list_bindings", args: []string{"list_bindings"},
			stdout: "source_name  source_kind  destination_name  destination_kind  routing_key  arguments\namq.topic    exchange     orders            queue             order.*      {}\n"},
		{name: "list_consumers", args: []string{"list_consumers", "queue_name", "consumer_tag", "ack_required", "prefetch_count", "messages_unacknowledged", "active", "activity_status"},
			stdout: "queue_name  consumer_tag  ack_required  prefetch_count  messages_unacknowledged  active  activity_status\norders      ctag-1        true          10              2                        true    single_active\norders      ctag-2        true          10              0                        false   waiting\n"},
		{name: "list_consumers defaults are rabbitmqctl's", args: []string{"list_consumers"},
			stdout: "queue_name  channel_pid  consumer_tag  ack_required  prefetch_count  active  arguments\norders      <n1.c7.1>    ctag-1        true          10              true    {}\norders      <n2.c1.1>    ctag-2        true          10              false   {}\n"},
		{name: "list_connections rabbitmqctl columns", args: []string{"list_connections", "name", "peer_host", "peer_port", "state"},
			stdout: "name                             peer_host  peer_port  state\n10.0.0.9:40000 -> 10.0.0.1:5672  10.0.0.9   40000      running\n10.0.0.8:40001 -> 10.0.0.2:5672  10.0.0.8   40001      running\n"},
		{name: "list_connections", args: []string{"list_connections"},
			stdout:  "node  id  peer            user   vhost  channels\nn1    c7  10.0.0.9:40000  guest  /      2\nn2    c1  10.0.0.8:40001  app    prod   1\n",
			request: &proto.ListConnectionsRequest{}},
		{name: "list_connections local", args: []string{"list_connections", "--local", "id"},
			stdout: "id\nc7\nc1\n", request: &proto.ListConnectionsRequest{Local: true}},
		{name: "list_connections client name", args: []string{"list_connections", "id", "user_provided_name", "client_properties"},
			stdout: "id  user_provided_name  client_properties\nc7  orders-worker       {\"connection_name\":\"orders-worker\"}\nc1                      {}\n"},
		{name: "close_connection", args: []string{"close_connection", "n2", "c1", "maintenance"},
			stdout: "Closed connection c1 on node n2\n", request: &proto.CloseConnectionRequest{Node: "n2", Id: "c1", Reason: "maintenance"}},
		{name: "set_policy", args: []string{"set_policy", "ttl", "^orders$", `{"message-ttl":60000,"dead-letter-exchange":"dlx"}`, "--priority", "1", "--apply-to", "queues"},
			stdout: `Set policy "ttl" for pattern "^orders$" to {"message-ttl":60000,"dead-letter-exchange":"dlx"} with priority 1 for vhost "/"` + "\n",
			request: &proto.SetPolicyRequest{Vhost: "/", Name: "ttl", Pattern: "^orders$", ApplyTo: "queues", Priority: 1,
				Definition: &proto.PolicyDefinition{MessageTtl: i64(60000), DeadLetterExchange: str("dlx")}}},
		{name: "set_policy every key", args: []string{"-p", "prod", "set_policy", "all", ".*",
			`{"message-ttl":0,"expires":1000,"dead-letter-exchange":"d","dead-letter-routing-key":"k","max-length":5,"max-length-bytes":100,"overflow":"reject-publish","delivery-limit":5,"consumer-timeout":60000,"delayed-retry-type":"failed","delayed-retry-min":100,"delayed-retry-max":900,"delayed-retry-multiplier":3,"queue-leader-locator":"client-local"}`},
			stdout: `Set policy "all" for pattern ".*" to {"message-ttl":0,"expires":1000,"dead-letter-exchange":"d","dead-letter-routing-key":"k","max-length":5,"max-length-bytes":100,"overflow":"reject-publish","delivery-limit":5,"consumer-timeout":60000,"delayed-retry-type":"failed","delayed-retry-min":100,"delayed-retry-max":900,"delayed-retry-multiplier":3,"queue-leader-locator":"client-local"} with priority 0 for vhost "prod"` + "\n",
			request: &proto.SetPolicyRequest{Vhost: "prod", Name: "all", Pattern: ".*", ApplyTo: "all",
				Definition: &proto.PolicyDefinition{MessageTtl: i64(0), Expires: i64(1000), DeadLetterExchange: str("d"), DeadLetterRoutingKey: str("k"),
					MaxLength: i64(5), MaxLengthBytes: i64(100), Overflow: str("reject-publish"), DeliveryLimit: i64(5), ConsumerTimeout: i64(60000),
					DelayedRetryType: str("failed"), DelayedRetryMin: i64(100), DelayedRetryMax: i64(900), DelayedRetryMultiplier: i64(3),
					QueueLeaderLocator: str("client-local")}}},
		{name: "set_operator_policy json", args: []string{"--json", "set_operator_policy", "cap", ".*", `{"max-length":100}`},
			stdout: "{\n  \"ok\": true\n}\n",
			request: &proto.SetPolicyRequest{Vhost: "/", Name: "cap", Pattern: ".*", ApplyTo: "all", Operator: true,
				Definition: &proto.PolicyDefinition{MaxLength: i64(100)}}},
		{name: "clear_policy", args: []string{"clear_policy", "ttl"},
			stdout: "Cleared policy \"ttl\" in vhost \"/\"\n", request: &proto.ClearPolicyRequest{Vhost: "/", Name: "ttl"}},
		{name: "clear_operator_policy", args: []string{"clear_operator_policy", "cap"},
			stdout: "Cleared operator policy \"cap\" in vhost \"/\"\n", request: &proto.ClearPolicyRequest{Vhost: "/", Name: "cap", Operator: true}},
		{name: "list_policies", args: []string{"list_policies"},
			stdout:  "vhost  name  pattern   apply_to  definition                                          priority\n/      ttl   ^orders$  queues    {\"dead-letter-exchange\":\"dlx\",\"message-ttl\":60000}  1\n",
			request: &proto.ListPoliciesRequest{Vhost: "/"}},
		{name: "list_operator_policies", args: []string{"list_operator_policies", "name"},
			stdout: "name\nttl\n", request: &proto.ListPoliciesRequest{Vhost: "/", Operator: true}},
		{name: "purge_queue", args: []string{"purge_queue", "orders"},
			stdout: "Purged 10 messages from queue \"orders\" in vhost \"/\"\n", request: &proto.PurgeQueueRequest{Vhost: "/", Name: "orders"}},
		{name: "purge_queue json", args: []string{"purge_queue", "orders", "--json"},
			stdout: "{\n  \"message_count\": 10,\n  \"ok\": true\n}\n"},
		{name: "delete_queue", args: []string{"delete_queue", "orders", "--if-unused", "--if-empty"},
			stdout: "Deleted queue \"orders\" in vhost \"/\" (4 messages)\n", request: &proto.DeleteQueueRequest{Vhost: "/", Name: "orders", IfUnused: true, IfEmpty: true}},
		{name: "add_user", args: []string{"add_user", "app", "secret"},
			stdout: "Added user \"app\"\n", request: &proto.AddUserRequest{Name: "app", Password: "secret"}},
		{name: "delete_user", args: []string{"delete_user", "app"},
			stdout: "Deleted user \"app\"\n", request: &proto.DeleteUserRequest{Name: "app"}},
		{name: "change_password", args: []string{"change_password", "app", "new"},
			stdout: "Changed the password of user \"app\"\n", request: &proto.ChangePasswordRequest{Name: "app", Password: "new"}},
		{name: "set_user_tags", args: []string{"set_user_tags", "app", "monitoring", "policymaker"},
			stdout: "Set the tags of user \"app\" to [monitoring, policymaker]\n", request: &proto.SetUserTagsRequest{Name: "app", Tags: []string{"monitoring", "policymaker"}}},
		{name: "set_user_tags none", args: []string{"set_user_tags", "app"},
			stdout: "Set the tags of user \"app\" to []\n", request: &proto.SetUserTagsRequest{Name: "app"}},
		{name: "list_users", args: []string{"list_users"},
			stdout: "user   tags\nguest  [\"administrator\"]\napp    []\n", request: &proto.ListRequest{}},
		{name: "list_users json", args: []string{"list_users", "--json"},
			stdout: "[\n  {\n    \"tags\": [\n      \"administrator\"\n    ],\n    \"user\": \"guest\"\n  },\n  {\n    \"tags\": [],\n    \"user\": \"app\"\n  }\n]\n"},
		{name: "set_permissions", args: []string{"set_permissions", "-p", "prod", "app", "^app\\.", ".*", ""},
			stdout:  "Set permissions of user \"app\" in vhost \"prod\"\n",
			request: &proto.SetPermissionsRequest{User: "app", Vhost: "prod", Configure: "^app\\.", Write: ".*", Read: ""}},
		{name: "clear_permissions", args: []string{"clear_permissions", "--vhost", "prod", "app"},
			stdout: "Cleared permissions of user \"app\" in vhost \"prod\"\n", request: &proto.ClearPermissionsRequest{User: "app", Vhost: "prod"}},
		{name: "list_permissions", args: []string{"list_permissions"},
			stdout: "user   configure  write  read\nguest  .*         .*     .*\n", request: &proto.ListRequest{Vhost: "/"}},
		{name: "add_vhost", args: []string{"add_vhost", "prod", "--description", "production"},
			stdout: "Added vhost \"prod\"\n", request: &proto.AddVhostRequest{Name: "prod", Description: "production"}},
		{name: "delete_vhost", args: []string{"delete_vhost", "prod"},
			stdout: "Deleted vhost \"prod\"\n", request: &proto.DeleteVhostRequest{Name: "prod"}},
		{name: "list_vhosts", args: []string{"list_vhosts", "name", "description"},
			stdout: "name  description\n/     Default virtual host\nprod  \n"},
		{name: "forget_cluster_node", args: []string{"forget_cluster_node", "n3"},
			stdout: "Removed node n3 from the cluster\n", request: &proto.RemoveNodeRequest{NodeId: "n3"}},
		{name: "transfer_leadership", args: []string{"transfer_leadership"},
			stdout: "Leader is now n2\n", request: &proto.TransferLeadershipRequest{}},
		{name: "transfer_leadership to", args: []string{"--json", "transfer_leadership", "n3"},
			stdout: "{\n  \"leader_id\": \"n3\",\n  \"ok\": true\n}\n", request: &proto.TransferLeadershipRequest{NodeId: "n3"}},
		{name: "digest", args: []string{"digest"}, stdout: "n1 42 ab12\n", request: &proto.DigestRequest{}},
		{name: "digest of a group", args: []string{"digest", "q2"}, stdout: "n1 42 ab12\n", request: &proto.DigestRequest{Group: "q2"}},
		{name: "digest json", args: []string{"digest", "--json"},
			stdout: "{\n  \"applied_index\": \"42\",\n  \"digest\": \"ab12\",\n  \"node_id\": \"n1\"\n}\n"},
		{name: "help", args: []string{"help"}, stdout: usageText()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runCase(t, &fakeAdmin{}, tc) })
	}
}

func usageText() string {
	var b bytes.Buffer
	printUsage(&b)
	return b.String()
}

func TestRun_ClusterStatusJSON(t *testing.T) {
	dial, _ := startFake(t, &fakeAdmin{})
	var out, errb bytes.Buffer
	if code := run([]string{"cluster_status", "--json"}, &out, &errb, dial); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{`"node_id": "n1"`, `"raft_state": "Leader"`, `"clock_ms": "1700000000000"`, `"suffrage": "voter"`, `"grpc_addr": "10.0.0.2:5680"`} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("cluster_status --json lacks %s:\n%s", want, out.String())
		}
	}
}

func TestRun_UsageErrors(t *testing.T) {
	cases := []verbCase{
		{name: "no verb", args: nil, code: exitUsage, stderr: "verbs:"},
		{name: "unknown verb names the closest", args: []string{"list_queue"}, code: exitUsage, stderr: "Did you mean 'list_queues'?"},
		{name: "unknown verb far from any", args: []string{"frobnicate"}, code: exitUsage, stderr: "Command 'frobnicate' not found.\nraftmqctl --help lists the verbs.\n"},
		{name: "unknown flag", args: []string{"--bogus", "list_queues"}, code: exitUsage, stderr: "bogus"},
		{name: "missing args", args: []string{"set_policy", "a", ".*"}, code: exitUsage, stderr: "usage: raftmqctl set_policy NAME PATTERN DEFINITION"},
		{name: "too many args", args: []string{"purge_queue", "a", "b"}, code: exitUsage, stderr: "usage: raftmqctl purge_queue NAME"},
		{name: "unknown policy key", args: []string{"set_policy", "p", ".*", `{"message-ttl":1,"x-message-ttl":2}`}, code: exitUsage, stderr: `unknown field "x-message-ttl"`},
		{name: "bad policy json", args: []string{"set_policy", "p", ".*", `{"message-ttl":`}, code: exitUsage, stderr: "policy definition"},
		{name: "non-integer ttl", args: []string{"set_policy", "p", ".*", `{"message-ttl":"soon"}`}, code: exitUsage, stderr: "message-ttl"},
		{name: "bad apply-to", args: []string{"set_policy", "p", ".*", `{"message-ttl":1}`, "--apply-to", "streams"}, code: exitUsage, stderr: "--apply-to"},
		{name: "unknown column", args: []string{"list_queues", "name", "colour"}, code: exitUsage, stderr: `unknown column "colour"`},
		{name: "bad timeout", args: []string{"--timeout", "soon", "digest"}, code: exitUsage, stderr: "timeout"},
		{name: "grow strategy", args: []string{"grow", "n2", "odd"}, code: exitUsage, stderr: "strategy 'odd' is not recognised."},
		{name: "rebalance type", args: []string{"rebalance", "streams"}, code: exitUsage, stderr: "type streams is not supported. Try one of all, classic, quorum."},
		{name: "shrink without node", args: []string{"shrink"}, code: exitUsage, stderr: "usage: raftmqctl shrink NODE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeAdmin{}
			runCase(t, fake, tc)
			if tc.name != "unknown column" && fake.lastRequest() != nil {
				t.Fatalf("a usage error reached the node: %v", fake.lastRequest())
			}
		})
	}
}

func TestRun_CallFailures(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   int
		stderr string
	}{
		{status.Error(codes.NotFound, "404 NOT_FOUND - no queue 'x'"), exitFailed, "NotFound: 404 NOT_FOUND - no queue 'x'"},
		{status.Error(codes.InvalidArgument, "message-ttl -1 must be >= 0"), exitFailed, "message-ttl -1 must be >= 0"},
		{status.Error(codes.Unavailable, "no leader is known"), exitFailed, "no leader is known"},
		{status.Error(codes.Unavailable, "connection error: desc = \"transport: connection refused\""), exitUnavailable, "cannot reach"},
	} {
		fake := &fakeAdmin{err: tc.err}
		runCase(t, fake, verbCase{args: []string{"purge_queue", "x"}, code: tc.code, stderr: tc.stderr})
	}
}

func TestRun_NodeSelection(t *testing.T) {
	dial, dialed := startFake(t, &fakeAdmin{})
	var out, errb bytes.Buffer
	t.Setenv("RAFTMQ_NODE", "")
	run([]string{"digest"}, &out, &errb, dial)
	t.Setenv("RAFTMQ_NODE", "env-host:5680")
	run([]string{"digest"}, &out, &errb, dial)
	run([]string{"--node", "flag-host:1234", "digest"}, &out, &errb, dial)
	if got := strings.Join(*dialed, ","); got != "localhost:5680,env-host:5680,flag-host:1234" {
		t.Fatalf("dialed %s", got)
	}

	// A node that cannot be dialled, or that refuses connections, is 69.
	code := run([]string{"digest"}, &out, &errb, func(string) (proto.AdminClient, error) { return nil, errors.New("bad address") })
	if code != exitUnavailable {
		t.Fatalf("dial failure exit %d", code)
	}
	errb.Reset()
	code = runWith([]string{"--node", "127.0.0.1:1", "--timeout", "5s", "digest"}, &out, &errb, dialNode)
	if code != exitUnavailable || !strings.Contains(errb.String(), "cannot reach 127.0.0.1:1") {
		t.Fatalf("refused connection: exit %d, %s", code, errb.String())
	}
}
