package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/raftmq/raftmq/amqp"
	"github.com/raftmq/raftmq/api/client"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// config is what a node is started with. Every flag is also an environment
// variable RAFTMQ_<NAME> (dashes become underscores); a flag given on the
// command line wins over the environment.
type config struct {
	// Settings are every flag's value as parsed, secrets withheld
	// (raftmqctl environment).
	Settings []*proto.Setting

	NodeID          string
	DataDir         string
	RaftLogStore    string
	AMQPAddr        string
	GRPCAddr        string
	RaftAddr        string
	GossipAddr      string
	HTTPAddr        string
	Advertise       string
	Join            []string
	BootstrapExpect int
	DefaultUser     string
	DefaultPassword string
	MaxMessageSize  int
	Lookahead       int
	ConsumerTimeout int64 // ms; 0: none
	LogLevel        string
	Pprof           bool
	NodeDownAfter   time.Duration
	RaftTimeout     time.Duration
	MaxClockOffset  time.Duration
	QueueGroups     int
	QueueGroupsPer  bool // --queue-groups per-node
	PlaceQueues     bool
	Cluster         clusterSecurity

	// HeaderTimestamp and HeaderRoutingNode are RabbitMQ's incoming
	// message interceptors.
	HeaderTimestamp, HeaderRoutingNode amqp.Stamp

	// TLS is the AMQPS listener and its certificates.
	TLS tlsConfig
	// Limits bound what clients may use.
	Limits limitsConfig
	// Management is RabbitMQ's management HTTP API (management.go).
	Management managementConfig
}

// tlsConfig configures the AMQPS listener. Certificate, key and CA are
// read again on SIGHUP.
type tlsConfig struct {
	AMQPSAddr string // listens only when Cert is set
	Cert      string // PEM certificate chain file
	Key       string // PEM private key file
	CA        string // PEM file of the CAs client certificates must chain to
	Verify    string // none, optional or required
}

// limitsConfig caps clients' use of the node.
type limitsConfig struct {
	MaxConnections      int
	ChannelMax          int
	FrameMax            int
	MaxQueuesPerVhost   int
	MaxConnectionBuffer int
	WriteTimeout        time.Duration
	// VMMemoryHighWatermark is the resident memory, in bytes, at which
	// publishers are blocked; 0 takes VMMemoryHighWatermarkRelative.
	VMMemoryHighWatermark int64
	// VMMemoryHighWatermarkRelative is the mark as a fraction of the
	// memory available (0 with a mark in bytes; both 0: 0.4).
	VMMemoryHighWatermarkRelative float64
	// DiskFreeLimit is the data dir's free space below which publishers
	// are blocked.
	DiskFreeLimit byteSize
}

// defaultRaftTimeout is raft's heartbeat and election timeout. Followers
// start an election between one and two of it after the leader falls
// silent, so confirmed publishing resumes about a second after the leader
// dies; heartbeats go out every tenth of it from their own goroutine, so
// a leader busy with its disk still holds its followers.
const defaultRaftTimeout = 500 * time.Millisecond

// parseConfig reads flags from args and falls back to the environment (env
// is os.Getenv in production; tests pass a map lookup).
func parseConfig(args []string, env func(string) string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("raftmq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var join string
	fs.StringVar(&c.NodeID, "node-id", "", "this node's id, unique in the cluster (default: the host name)")
	fs.StringVar(&c.DataDir, "data-dir", client.DefaultDataDir, "folder for the Raft log, snapshots and node state")
	fs.StringVar(&c.RaftLogStore, "raft-log-store", "auto", "raft log store: wal (segment files), bolt (raft-boltdb), or auto (what the data dir holds, else wal)")
	fs.StringVar(&c.AMQPAddr, "amqp-addr", ":5672", "AMQP 0-9-1 listen address")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", ":5680", "gRPC listen address (admin API and internal forwarding)")
	fs.StringVar(&c.RaftAddr, "raft-addr", ":5681", "Raft transport listen address")
	fs.Var(queueGroupsFlag{c}, "queue-groups", "how many queue groups (Raft groups besides the metadata group) the cluster runs, 0 to 64, or per-node: one for each node, at least 3, more as nodes join; the metadata leader's value counts, a group once created stays; queues live in them with --place-queues")
	fs.BoolVar(&c.PlaceQueues, "place-queues", false, "place new durable queues (not exclusive, auto-delete or with x-expires) into the queue groups; the metadata leader's value counts, and once on it stays on. A node serves the queues of groups it is not a member of through their members")
	fs.StringVar(&c.GossipAddr, "gossip-addr", ":7946", "memberlist gossip listen address (TCP and UDP)")
	fs.StringVar(&c.HTTPAddr, "http-addr", ":15692", "HTTP listen address for /metrics, /healthz and /readyz")
	fs.StringVar(&c.Advertise, "advertise-host", "", "host or IP other nodes reach this node at (default: the listen host, else the host name)")
	fs.StringVar(&join, "join", "", "comma-separated gossip addresses (host:port) of nodes to join")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", 1, "bootstrap the cluster once this many nodes see each other (a node with --join hears from a seed first)")
	fs.StringVar(&c.DefaultUser, "default-user", "guest", "user created when a new cluster bootstraps")
	fs.StringVar(&c.DefaultPassword, "default-password", "guest", "password of the default user")
	fs.IntVar(&c.MaxMessageSize, "max-message-size", amqp.DefaultMaxMessageSize, "largest message body accepted, in bytes (at most 134217728, 128 MiB)")
	fs.IntVar(&c.Lookahead, "consumer-lookahead", 10, "a consumer with a prefetch of at least 10 may be assigned this many times its prefetch beyond it, held by its node and written as it acks (at most 2,000 more; from protocol level 14 it grows while the consumer acks faster than its credit returns); 0 turns it off")
	fs.Int64Var(&c.ConsumerTimeout, "consumer-timeout", 1800000, "ms a delivery may stay unacknowledged before its consumer is cancelled, or its channel closed with 406 for a client without consumer_cancel_notify (RabbitMQ's consumer_timeout), unless its queue sets x-consumer-timeout or a consumer-timeout policy; 0 means none")
	fs.TextVar(&c.HeaderTimestamp, "set-header-timestamp", amqp.StampOff, "give each message published on this node the time it arrived, as RabbitMQ's message_interceptors.incoming.set_header_timestamp: a timestamp_in_ms header (ms) and the timestamp property (s); keep leaves a publisher's own (overwrite = false), overwrite replaces them, off adds nothing")
	fs.TextVar(&c.HeaderRoutingNode, "set-header-routing-node", amqp.StampOff, "give each message published on this node an x-routed-by header naming this node, as RabbitMQ's message_interceptors.incoming.set_header_routing_node: keep, overwrite or off")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve /debug/pprof on the HTTP address")
	fs.DurationVar(&c.NodeDownAfter, "node-down-after", 1500*time.Millisecond, "how long a member stays dead (in gossip, or unreached by the leader's raft) before its consumers are cancelled; at least --raft-timeout, which it follows when not given")
	fs.DurationVar(&c.MaxClockOffset, "max-clock-offset", 500*time.Millisecond, "how far this node's wall clock may be from the voters' (the quorum's) before it hands leadership over and its clock health check fails")
	fs.DurationVar(&c.RaftTimeout, "raft-timeout", defaultRaftTimeout, "how long followers go without hearing from the leader before they elect another (raft's heartbeat and election timeouts; the leader's lease is half of it)")
	c.Cluster.flags(fs)
	c.Management.flags(fs)

	// AMQPS (TLS for clients).
	fs.StringVar(&c.TLS.AMQPSAddr, "amqps-addr", ":5671", "AMQP 0-9-1 over TLS listen address (listens only when --tls-cert is set)")
	fs.StringVar(&c.TLS.Cert, "tls-cert", "", "PEM certificate (chain) file of the AMQPS listener; reloaded on SIGHUP")
	fs.StringVar(&c.TLS.Key, "tls-key", "", "PEM private key file of --tls-cert; reloaded on SIGHUP")
	fs.StringVar(&c.TLS.CA, "tls-ca", "", "PEM file of the CAs that sign client certificates; reloaded on SIGHUP")
	fs.StringVar(&c.TLS.Verify, "tls-verify", "", "client certificates: none, optional (verified when given) or required (default: optional with --tls-ca, none without)")

	// Client limits.
	fs.IntVar(&c.Limits.MaxConnections, "max-connections", 0, "most client connections open on this node; 0 means no limit")
	fs.IntVar(&c.Limits.ChannelMax, "channel-max", amqp.DefaultChannelMax, "most channels per connection, negotiated in connection.tune (1-65535)")
	fs.IntVar(&c.Limits.FrameMax, "frame-max", amqp.DefaultFrameMax, "largest frame accepted, in bytes, negotiated in connection.tune")
	fs.IntVar(&c.Limits.MaxQueuesPerVhost, "max-queues-per-vhost", 0, "most queues in each vhost; 0 means no limit")
	fs.IntVar(&c.Limits.MaxConnectionBuffer, "max-connection-buffer", amqp.DefaultMaxBufferedBytes, "bytes a connection may have waiting to be written before it is closed as not reading")
	fs.DurationVar(&c.Limits.WriteTimeout, "write-timeout", amqp.DefaultWriteTimeout, "a connection whose socket takes nothing for this long is closed")
	fs.Var(watermarkFlag{&c.Limits}, "vm-memory-high-watermark", "resident memory (as top and /api/nodes show it) at which publishers are blocked: a fraction of the system's (or cgroup's) memory such as 0.4, RabbitMQ's vm_memory_high_watermark.relative, or bytes, optionally with a unit (1GB, 512MiB), its .absolute; 0 means 0.4")
	c.Limits.DiskFreeLimit = defaultDiskFreeLimit
	fs.Var(&c.Limits.DiskFreeLimit, "disk-free-limit", "free space of the data dir below which publishers are blocked: bytes, or with a unit (500MB, 2GB, 1GiB); 0 never blocks")

	// The environment first, so that flags given on the command line win.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "RAFTMQ_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := env(name); v != "" && envErr == nil {
			// Through the flag set, so that it counts as given (fs.Visit).
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, s := range strings.Split(join, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.Join = append(c.Join, s)
		}
	}
	if c.NodeID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "raftmq"
		}
		c.NodeID = h
	}
	if c.BootstrapExpect < 1 {
		return nil, fmt.Errorf("--bootstrap-expect must be at least 1, got %d", c.BootstrapExpect)
	}
	if c.RaftTimeout < 50*time.Millisecond {
		return nil, fmt.Errorf("--raft-timeout must be at least 50ms, got %v", c.RaftTimeout)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if least := cluster.LeastDownAfter(c.RaftTimeout); !given["node-down-after"] {
		c.NodeDownAfter = max(c.NodeDownAfter, least)
	} else if c.NodeDownAfter < least {
		return nil, fmt.Errorf("--node-down-after %v is shorter than --raft-timeout %v: an idle leader and a live follower hear from each other only every two fifths of it, so live nodes would count themselves cut off and be declared down; give at least %v or leave it out",
			c.NodeDownAfter, c.RaftTimeout, least)
	}
	if c.MaxClockOffset < time.Millisecond || c.MaxClockOffset > time.Minute {
		return nil, fmt.Errorf("--max-clock-offset must be between 1ms and 1m, got %v", c.MaxClockOffset)
	}
	if c.Lookahead < 0 {
		return nil, fmt.Errorf("--consumer-lookahead must not be negative, got %d", c.Lookahead)
	}
	if c.ConsumerTimeout < 0 {
		return nil, fmt.Errorf("--consumer-timeout must not be negative (0 means none), got %d", c.ConsumerTimeout)
	}
	if err := c.Cluster.check(); err != nil {
		return nil, err
	}
	if err := c.Cluster.checkMultiNode(c.BootstrapExpect, c.Join); err != nil {
		return nil, err
	}
	if c.MaxMessageSize < 1 || c.MaxMessageSize > fsm.MaxBodySize {
		return nil, fmt.Errorf("--max-message-size must be between 1 and %d, got %d", fsm.MaxBodySize, c.MaxMessageSize)
	}
	if err := c.TLS.check(); err != nil {
		return nil, err
	}
	if err := c.Limits.check(); err != nil {
		return nil, err
	}
	c.Settings = settingsOf(fs, c)
	return c, nil
}

// secretFlags are the flags whose values raftmqctl environment withholds.
var secretFlags = map[string]bool{"cluster-secret": true, "default-password": true, "gossip-key": true}

// settingsOf lists every flag with the value the node runs with, sorted
// by name, for raftmqctl environment: a secret only says whether it is
// set.
func settingsOf(fs *flag.FlagSet, c *config) []*proto.Setting {
	var out []*proto.Setting
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		switch {
		case f.Name == "node-id":
			v = c.NodeID
		case secretFlags[f.Name] && v != "":
			v = "<set>"
		}
		out = append(out, &proto.Setting{Name: f.Name, Value: v})
	})
	return out
}

// check validates the AMQPS settings and fills in the verify default.
func (t *tlsConfig) check() error {
	if t.Verify == "" {
		t.Verify = "none"
		if t.CA != "" {
			t.Verify = "optional"
		}
	}
	switch t.Verify {
	case "none", "optional", "required":
	default:
		return fmt.Errorf("--tls-verify must be none, optional or required, got %q", t.Verify)
	}
	switch {
	case t.Cert == "" && (t.Key != "" || t.CA != ""):
		return fmt.Errorf("--tls-key and --tls-ca need --tls-cert")
	case t.Cert != "" && t.Key == "":
		return fmt.Errorf("--tls-cert needs --tls-key")
	case t.Verify != "none" && t.CA == "":
		return fmt.Errorf("--tls-verify %s needs --tls-ca", t.Verify)
	}
	return nil
}

// check validates the limits.
func (l *limitsConfig) check() error {
	switch {
	case l.MaxConnections < 0:
		return fmt.Errorf("--max-connections must not be negative, got %d", l.MaxConnections)
	case l.ChannelMax < 1 || l.ChannelMax > 65535:
		return fmt.Errorf("--channel-max must be between 1 and 65535, got %d", l.ChannelMax)
	case l.FrameMax < 4096 || l.FrameMax > 128<<20:
		return fmt.Errorf("--frame-max must be between 4096 and %d, got %d", 128<<20, l.FrameMax)
	case l.MaxQueuesPerVhost < 0:
		return fmt.Errorf("--max-queues-per-vhost must not be negative, got %d", l.MaxQueuesPerVhost)
	case l.MaxConnectionBuffer < 64<<10:
		return fmt.Errorf("--max-connection-buffer must be at least %d, got %d", 64<<10, l.MaxConnectionBuffer)
	case l.WriteTimeout <= 0:
		return fmt.Errorf("--write-timeout must be positive, got %v", l.WriteTimeout)
	case l.VMMemoryHighWatermark < 0:
		return fmt.Errorf("--vm-memory-high-watermark must not be negative, got %d", l.VMMemoryHighWatermark)
	}
	return nil
}

// errHelp is returned when -h or --help was asked for (usage was printed).
var errHelp = flag.ErrHelp

// queueGroupsFlag is --queue-groups: a number of groups, or per-node.
type queueGroupsFlag struct{ c *config }

func (f queueGroupsFlag) String() string {
	switch {
	case f.c == nil:
		return "0"
	case f.c.QueueGroupsPer:
		return "per-node"
	}
	return strconv.Itoa(f.c.QueueGroups)
}

func (f queueGroupsFlag) Set(s string) error {
	if s == "per-node" {
		f.c.QueueGroups, f.c.QueueGroupsPer = 0, true
		return nil
	}
	k, err := strconv.Atoi(s)
	if err != nil || k < 0 || k > fsm.MaxQueueGroups {
		return fmt.Errorf("want a number of groups, 0 to %d, or per-node", fsm.MaxQueueGroups)
	}
	f.c.QueueGroups, f.c.QueueGroupsPer = k, false
	return nil
}

// watermarkFlag is --vm-memory-high-watermark: a number with a decimal
// point and no unit is a fraction of the memory available (RabbitMQ's
// vm_memory_high_watermark.relative), anything else a size in bytes (its
// .absolute).
type watermarkFlag struct{ l *limitsConfig }

func (f watermarkFlag) String() string {
	if f.l == nil {
		return "0"
	}
	if f.l.VMMemoryHighWatermarkRelative > 0 {
		return strconv.FormatFloat(f.l.VMMemoryHighWatermarkRelative, 'g', -1, 64)
	}
	return strconv.FormatInt(f.l.VMMemoryHighWatermark, 10)
}

func (f watermarkFlag) Set(s string) error {
	s = strings.TrimSpace(s)
	if strings.Contains(s, ".") {
		if r, err := strconv.ParseFloat(s, 64); err == nil {
			if r <= 0 || r > 1 {
				return fmt.Errorf("a fraction of the memory available must be above 0 and at most 1, not %s", s)
			}
			f.l.VMMemoryHighWatermark, f.l.VMMemoryHighWatermarkRelative = 0, r
			return nil
		}
	}
	var b byteSize
	if err := b.Set(s); err != nil {
		return fmt.Errorf("%w, or a fraction of the memory available such as 0.4", err)
	}
	if uint64(b) > math.MaxInt64 {
		return fmt.Errorf("%q is too large", s)
	}
	f.l.VMMemoryHighWatermark, f.l.VMMemoryHighWatermarkRelative = int64(b), 0
	return nil
}
