package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// config is what a node is started with. Every flag is also an environment
// variable RAFTMQ_<NAME> (dashes become underscores); a flag given on the
// command line wins over the environment.
type config struct {
	NodeID          string
	DataDir         string
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
	LogLevel        string
	Pprof           bool
	NodeDownAfter   time.Duration
	Cluster         clusterSecurity
}

// parseConfig reads flags from args and falls back to the environment (env
// is os.Getenv in production; tests pass a map lookup).
func parseConfig(args []string, env func(string) string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("raftmq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var join string
	fs.StringVar(&c.NodeID, "node-id", "", "this node's id, unique in the cluster (default: the host name)")
	fs.StringVar(&c.DataDir, "data-dir", "raftmq-data", "folder for the Raft log, snapshots and node state")
	fs.StringVar(&c.AMQPAddr, "amqp-addr", ":5672", "AMQP 0-9-1 listen address")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", ":5680", "gRPC listen address (admin API and internal forwarding)")
	fs.StringVar(&c.RaftAddr, "raft-addr", ":5681", "Raft transport listen address")
	fs.StringVar(&c.GossipAddr, "gossip-addr", ":7946", "memberlist gossip listen address (TCP and UDP)")
	fs.StringVar(&c.HTTPAddr, "http-addr", ":15692", "HTTP listen address for /metrics, /healthz and /readyz")
	fs.StringVar(&c.Advertise, "advertise-host", "", "host or IP other nodes reach this node at (default: the listen host, else the host name)")
	fs.StringVar(&join, "join", "", "comma-separated gossip addresses (host:port) of nodes to join")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", 1, "bootstrap the cluster once this many nodes see each other")
	fs.StringVar(&c.DefaultUser, "default-user", "guest", "user created when a new cluster bootstraps")
	fs.StringVar(&c.DefaultPassword, "default-password", "guest", "password of the default user")
	fs.IntVar(&c.MaxMessageSize, "max-message-size", 128<<20, "largest message body accepted, in bytes")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve /debug/pprof on the HTTP address")
	fs.DurationVar(&c.NodeDownAfter, "node-down-after", 5*time.Second, "how long a dead member stays dead before its consumers are cancelled")
	c.Cluster.flags(fs)

	// The environment first, so that flags given on the command line win.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "RAFTMQ_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := env(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
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
	if err := c.Cluster.check(); err != nil {
		return nil, err
	}
	if c.MaxMessageSize < 1 || c.MaxMessageSize > 512<<20 {
		return nil, fmt.Errorf("--max-message-size must be between 1 and %d, got %d", 512<<20, c.MaxMessageSize)
	}
	return c, nil
}

// errHelp is returned when -h or --help was asked for (usage was printed).
var errHelp = flag.ErrHelp
