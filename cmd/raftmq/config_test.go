package main

import (
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/proto"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfig_DefaultsRunASingleNode(t *testing.T) {
	c, err := parseConfig(nil, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "raftmq-data" || c.AMQPAddr != ":5672" || c.GRPCAddr != ":5680" ||
		c.RaftAddr != ":5681" || c.GossipAddr != ":7946" || c.HTTPAddr != ":15692" ||
		c.BootstrapExpect != 1 || len(c.Join) != 0 || c.NodeID == "" || c.RaftTimeout != 500*time.Millisecond ||
		c.ConsumerTimeout != 1800000 || c.MaxClockOffset != 500*time.Millisecond {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestConfig_EnvironmentAndFlags(t *testing.T) {
	env := envMap(map[string]string{
		"RAFTMQ_NODE_ID":          "n-env",
		"RAFTMQ_JOIN":             "a:7946, b:7946",
		"RAFTMQ_BOOTSTRAP_EXPECT": "3",
		"RAFTMQ_ADVERTISE_HOST":   "10.0.0.5",
		"RAFTMQ_CLUSTER_SECRET":   "0123456789abcdef",
	})
	c, err := parseConfig([]string{"--node-id", "n-flag"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeID != "n-flag" {
		t.Fatalf("a flag must win over the environment: node id %q", c.NodeID)
	}
	if !reflect.DeepEqual(c.Join, []string{"a:7946", "b:7946"}) || c.BootstrapExpect != 3 || c.Advertise != "10.0.0.5" {
		t.Fatalf("environment not applied: %+v", c)
	}
}

func TestConfig_BadValuesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"--bootstrap-expect", "0"}},
		{env: map[string]string{"RAFTMQ_BOOTSTRAP_EXPECT": "three"}},
		{args: []string{"--max-message-size", "0"}},
		{args: []string{"--max-message-size", "536870913"}},
		{args: []string{"stray"}},
		{args: []string{"--tls-cert", "c.pem"}},
		{args: []string{"--tls-key", "k.pem"}},
		{args: []string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-verify", "required"}},
		{args: []string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem", "--tls-verify", "sometimes"}},
		{args: []string{"--channel-max", "0"}},
		{args: []string{"--channel-max", "65536"}},
		{args: []string{"--frame-max", "4095"}},
		{args: []string{"--max-connections", "-1"}},
		{args: []string{"--max-queues-per-vhost", "-1"}},
		{args: []string{"--max-connection-buffer", "1024"}},
		{args: []string{"--write-timeout", "0s"}},
		{env: map[string]string{"RAFTMQ_VM_MEMORY_HIGH_WATERMARK": "-5"}},
		{args: []string{"--raft-timeout", "10ms"}},
		{args: []string{"--consumer-timeout", "-1"}},
		{args: []string{"--max-clock-offset", "0s"}},
		{args: []string{"--max-clock-offset", "2m"}},
		{args: []string{"--queue-groups", "-1"}},
		{args: []string{"--queue-groups", "65"}},
		{args: []string{"--queue-groups", "auto"}},
		{env: map[string]string{"RAFTMQ_QUEUE_GROUPS": "per node"}},
		{env: map[string]string{"RAFTMQ_CONSUMER_TIMEOUT": "30m"}},
	} {
		if _, err := parseConfig(tc.args, envMap(tc.env), io.Discard); err == nil {
			t.Errorf("args %v env %v: accepted", tc.args, tc.env)
		}
	}
}

func TestConfig_TLSAndLimits(t *testing.T) {
	c, err := parseConfig(nil, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.TLS.AMQPSAddr != ":5671" || c.TLS.Cert != "" || c.TLS.Verify != "none" ||
		c.Limits.ChannelMax != 2047 || c.Limits.FrameMax != 131072 || c.Limits.MaxConnections != 0 ||
		c.Limits.MaxQueuesPerVhost != 0 || c.Limits.VMMemoryHighWatermark != 0 {
		t.Fatalf("defaults = %+v %+v", c.TLS, c.Limits)
	}
	env := envMap(map[string]string{
		"RAFTMQ_TLS_CERT":                 "c.pem",
		"RAFTMQ_TLS_KEY":                  "k.pem",
		"RAFTMQ_TLS_CA":                   "ca.pem",
		"RAFTMQ_MAX_CONNECTIONS":          "100",
		"RAFTMQ_MAX_QUEUES_PER_VHOST":     "10",
		"RAFTMQ_VM_MEMORY_HIGH_WATERMARK": "1000000",
	})
	c, err = parseConfig([]string{"--amqps-addr", "127.0.0.1:5671", "--channel-max", "16", "--frame-max", "8192"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.TLS.Cert != "c.pem" || c.TLS.Key != "k.pem" || c.TLS.CA != "ca.pem" || c.TLS.Verify != "optional" ||
		c.TLS.AMQPSAddr != "127.0.0.1:5671" || c.Limits.MaxConnections != 100 || c.Limits.MaxQueuesPerVhost != 10 ||
		c.Limits.ChannelMax != 16 || c.Limits.FrameMax != 8192 || c.Limits.VMMemoryHighWatermark != 1000000 {
		t.Fatalf("parsed %+v %+v", c.TLS, c.Limits)
	}
}

func TestAdvertise(t *testing.T) {
	for _, tc := range []struct{ host, addr, want string }{
		{"10.0.0.5", ":5681", "10.0.0.5:5681"},
		{"10.0.0.5", "0.0.0.0:5681", "10.0.0.5:5681"},
		{"10.0.0.5", "127.0.0.1:5681", "127.0.0.1:5681"},
	} {
		if got := advertise(tc.host, tc.addr); got != tc.want {
			t.Errorf("advertise(%q, %q) = %q, want %q", tc.host, tc.addr, got, tc.want)
		}
	}
	if h, err := advertiseHost("", "127.0.0.2:5681"); err != nil || h != "127.0.0.2" {
		t.Errorf("advertiseHost from the raft address = %q, %v", h, err)
	}
	if h, _ := advertiseHost("", ":5681"); h == "" {
		t.Error("advertiseHost with no host gave nothing")
	}
}

// --consumer-timeout is RabbitMQ's consumer_timeout in ms; 0 turns it off
// (RabbitMQ's undefined), which the cluster takes as a negative duration.
func TestConfig_ConsumerTimeout(t *testing.T) {
	c, err := parseConfig(nil, envMap(map[string]string{"RAFTMQ_CONSUMER_TIMEOUT": "500"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ConsumerTimeout != 500 || consumerTimeout(c.ConsumerTimeout) != 500*time.Millisecond {
		t.Fatalf("consumer timeout %d", c.ConsumerTimeout)
	}
	if d := consumerTimeout(0); d >= 0 {
		t.Fatalf("0 gives %v, want a negative duration (none)", d)
	}
	if d := consumerTimeout(math.MaxInt64); d <= 0 {
		t.Fatalf("the largest value gives %v", d)
	}
}

// TestConfig_Settings: raftmqctl environment lists every flag with the
// value the node runs with, wherever it came from, and withholds secrets.
func TestConfig_Settings(t *testing.T) {
	env := envMap(map[string]string{
		"RAFTMQ_CLUSTER_SECRET":   "0123456789abcdef",
		"RAFTMQ_DEFAULT_PASSWORD": "hunter2-hunter2",
		"RAFTMQ_MAX_CONNECTIONS":  "10",
		"RAFTMQ_GOSSIP_KEY":       "MDEyMzQ1Njc4OWFiY2RlZg==",
		"RAFTMQ_ADMIN_PLAINTEXT":  "true",
		"RAFTMQ_BOOTSTRAP_EXPECT": "1",
	})
	c, err := parseConfig([]string{"--node-id", "n9", "--channel-max", "100"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range c.Settings {
		got[s.GetName()] = s.GetValue()
	}
	for name, want := range map[string]string{
		"node-id": "n9", "channel-max": "100", "max-connections": "10", "amqp-addr": ":5672",
		"admin-plaintext": "true", "admin-auth": "auto",
		"cluster-secret": "<set>", "default-password": "<set>", "gossip-key": "<set>",
	} {
		if got[name] != want {
			t.Errorf("%s = %q, want %q", name, got[name], want)
		}
	}
	for _, s := range c.Settings {
		for _, secret := range []string{"0123456789abcdef", "hunter2", "MDEyMzQ1"} {
			if strings.Contains(s.GetValue(), secret) {
				t.Errorf("%s shows a secret: %q", s.GetName(), s.GetValue())
			}
		}
	}
	if !slices.IsSortedFunc(c.Settings, func(a, b *proto.Setting) int { return strings.Compare(a.GetName(), b.GetName()) }) {
		t.Error("settings are not sorted by name")
	}
	// A secret left unset says so.
	c, err = parseConfig(nil, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Settings {
		if s.GetName() == "cluster-secret" && s.GetValue() != "" {
			t.Errorf("unset cluster-secret shows %q", s.GetValue())
		}
	}
}

// --vm-memory-high-watermark takes RabbitMQ's two settings: a fraction of
// the memory available (vm_memory_high_watermark.relative) or a size in
// bytes, with a unit or not (.absolute).
func TestConfig_MemoryWatermark(t *testing.T) {
	for _, tc := range []struct {
		arg      string
		bytes    int64
		relative float64
	}{
		{"0.4", 0, 0.4},
		{"1.0", 0, 1},
		{"1000000", 1000000, 0},
		{"512MiB", 512 << 20, 0},
		{"2GB", 2e9, 0},
		{"0", 0, 0},
	} {
		c, err := parseConfig([]string{"--vm-memory-high-watermark", tc.arg}, envMap(nil), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", tc.arg, err)
		}
		if c.Limits.VMMemoryHighWatermark != tc.bytes || c.Limits.VMMemoryHighWatermarkRelative != tc.relative {
			t.Fatalf("%s: %d bytes, relative %v", tc.arg, c.Limits.VMMemoryHighWatermark, c.Limits.VMMemoryHighWatermarkRelative)
		}
	}
	for _, bad := range []string{"1.5", "0.0", "-1", "lots", "40%"} {
		if _, err := parseConfig([]string{"--vm-memory-high-watermark", bad}, envMap(nil), io.Discard); err == nil {
			t.Fatalf("%s was taken", bad)
		}
	}
	if w := relativeMemoryWatermark(0.5); w <= 0 || w != relativeMemoryWatermark(1)/2 {
		t.Fatalf("half the memory: %d of %d", w, relativeMemoryWatermark(1))
	}
}

// --queue-groups takes a number or per-node; the command line wins over
// the environment either way, and the settings show what was taken.
func TestConfig_QueueGroups(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		fixed   int
		perNode bool
		shown   string
	}{
		{fixed: 0, shown: "0"},
		{args: []string{"--queue-groups", "5"}, fixed: 5, shown: "5"},
		{args: []string{"--queue-groups", "per-node"}, perNode: true, shown: "per-node"},
		{env: map[string]string{"RAFTMQ_QUEUE_GROUPS": "per-node"}, perNode: true, shown: "per-node"},
		{args: []string{"--queue-groups", "64"}, env: map[string]string{"RAFTMQ_QUEUE_GROUPS": "per-node"}, fixed: 64, shown: "64"},
		{args: []string{"--queue-groups", "per-node"}, env: map[string]string{"RAFTMQ_QUEUE_GROUPS": "2"}, perNode: true, shown: "per-node"},
	} {
		c, err := parseConfig(tc.args, envMap(tc.env), io.Discard)
		if err != nil {
			t.Fatalf("args %v env %v: %v", tc.args, tc.env, err)
		}
		if c.QueueGroups != tc.fixed || c.QueueGroupsPer != tc.perNode {
			t.Errorf("args %v env %v: queue groups %d, per node %v", tc.args, tc.env, c.QueueGroups, c.QueueGroupsPer)
		}
		for _, s := range c.Settings {
			if s.GetName() == "queue-groups" && s.GetValue() != tc.shown {
				t.Errorf("args %v env %v: shown as %q, want %q", tc.args, tc.env, s.GetValue(), tc.shown)
			}
		}
	}
}

// --node-down-after follows a long --raft-timeout when it is not given,
// and a given one too short for it is refused, from a flag or from the
// environment: an idle leader hears from a live follower only every two
// fifths of the timeout.
func TestConfig_NodeDownAfterOutlastsTheRaftTimeoutsSilences(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{want: 1500 * time.Millisecond},
		{args: []string{"--raft-timeout", "1s"}, want: 1500 * time.Millisecond},
		{args: []string{"--raft-timeout", "5s"}, want: 5 * time.Second},
		{env: map[string]string{"RAFTMQ_RAFT_TIMEOUT": "10s"}, want: 10 * time.Second},
		{args: []string{"--raft-timeout", "5s", "--node-down-after", "8s"}, want: 8 * time.Second},
		{args: []string{"--node-down-after", "500ms"}, want: 500 * time.Millisecond},
	} {
		cfg, err := parseConfig(c.args, envMap(c.env), io.Discard)
		if err != nil {
			t.Errorf("args %v env %v: %v", c.args, c.env, err)
			continue
		}
		if cfg.NodeDownAfter != c.want {
			t.Errorf("args %v env %v: --node-down-after %v, want %v", c.args, c.env, cfg.NodeDownAfter, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"--raft-timeout", "5s", "--node-down-after", "1500ms"}},
		{args: []string{"--raft-timeout", "5s", "--node-down-after", "3s"}},
		{args: []string{"--node-down-after", "499ms"}},
		{args: []string{"--raft-timeout", "5s"}, env: map[string]string{"RAFTMQ_NODE_DOWN_AFTER": "4s"}},
	} {
		_, err := parseConfig(c.args, envMap(c.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--node-down-after") {
			t.Errorf("args %v env %v: %v, want --node-down-after refused", c.args, c.env, err)
		}
	}
}
