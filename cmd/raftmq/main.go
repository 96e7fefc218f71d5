// Command raftmq runs one raftmq node: an AMQP 0-9-1 broker whose state
// lives in a Raft log shared with the other nodes of its cluster.
//
// With no flags it runs a single-node cluster with its data in
// ./raftmq-data. Every flag is also an environment variable RAFTMQ_<NAME>.
// `raftmq probe URL` checks a health endpoint (for container health checks).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/raftmq/raftmq/amqp"
	"github.com/raftmq/raftmq/api/grpcadmin"
	"github.com/raftmq/raftmq/api/metrics"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/broker"
	"github.com/raftmq/raftmq/internal/version"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

func main() {
	if wantsVersion(os.Args[1:]) {
		fmt.Println(version.String())
		os.Exit(0)
	}
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

func run(args []string, env func(string) string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "probe" {
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: raftmq probe URL")
			return 2
		}
		return probe(args[1], stderr)
	}
	cfg, err := parseConfig(args, env, stderr)
	if err != nil {
		if errors.Is(err, errHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "raftmq: %v\n", err)
		return 2
	}
	logger := newLogger(cfg.LogLevel, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, logger); err != nil {
		logger.Error("raftmq stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// serve runs a node until ctx is done. Listeners are opened (AMQP's only
// checked) first so that a taken port fails at once with a clear message.
func serve(ctx context.Context, cfg *config, logger *slog.Logger) error {
	// SIGHUP reloads certificates; it never stops the node.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	amqpAddr, amqpBound, err := reserveAddr(cfg.AMQPAddr)
	if err != nil {
		return fmt.Errorf("AMQP listener: %w", err)
	}
	grpcLn, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("gRPC listener: %w", err)
	}
	httpLn, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("HTTP listener: %w", err)
	}
	amqpsAddr, certs, err := checkAMQPS(cfg.TLS)
	if err != nil {
		return err
	}
	mgmtSrv, err := listenManagement(cfg.Management)
	if err != nil {
		return err
	}
	host, err := advertiseHost(cfg.Advertise, cfg.RaftAddr)
	if err != nil {
		return err
	}

	sec, err := cfg.Cluster.load(cfg.DataDir, cfg.NodeID, cfg.BootstrapExpect == 1 && len(cfg.Join) == 0)
	if err != nil {
		return err
	}
	sec.warn(logger, grpcLn.Addr())
	grpcSrv := grpc.NewServer(sec.serverOptions()...)
	amqpSrv := amqp.NewServer(amqp.Config{
		MaxMessageSize:    cfg.MaxMessageSize,
		ChannelMax:        uint16(cfg.Limits.ChannelMax),
		FrameMax:          uint32(cfg.Limits.FrameMax),
		MaxConnections:    cfg.Limits.MaxConnections,
		MaxQueuesPerVhost: cfg.Limits.MaxQueuesPerVhost,
		MaxBufferedBytes:  cfg.Limits.MaxConnectionBuffer,
		WriteTimeout:      cfg.Limits.WriteTimeout,
		ConsumerLookahead: cfg.Lookahead,
		HeaderTimestamp:   cfg.HeaderTimestamp,
		HeaderRoutingNode: cfg.HeaderRoutingNode,
		Logger:            logger,
	})
	node, err := cluster.Start(ctx, cluster.Config{
		NodeID:     cfg.NodeID,
		DataDir:    cfg.DataDir,
		GRPCServer: grpcSrv,
		Logger:     logger.With("component", "cluster"),
		// The AMQP server holds this node's clients: it takes their
		// deliveries and timeouts, direct replies and pauses.
		Sinks: cluster.SinksTo(amqpSrv),
		GroupConfig: cluster.GroupConfig{
			LogStore:           cfg.RaftLogStore,
			RaftAddr:           cfg.RaftAddr,
			RaftAdvertise:      advertise(host, cfg.RaftAddr),
			HeartbeatTimeout:   cfg.RaftTimeout,
			ElectionTimeout:    cfg.RaftTimeout,
			LeaderLeaseTimeout: cfg.RaftTimeout / 2,
			MaxMessageSize:     cfg.MaxMessageSize,
			QueueGroups:        cfg.QueueGroups,
			QueueGroupsPerNode: cfg.QueueGroupsPer,
			PlaceQueues:        cfg.PlaceQueues,
		},
		MembershipConfig: cluster.MembershipConfig{
			GRPCAddr:        advertise(host, grpcLn.Addr().String()),
			AMQPAddr:        advertise(host, amqpBound),
			GossipAddr:      cfg.GossipAddr,
			GossipAdvertise: advertise(host, cfg.GossipAddr),
			Join:            cfg.Join,
			BootstrapExpect: cfg.BootstrapExpect,
			NodeDownAfter:   cfg.NodeDownAfter,
		},
		SecurityConfig: cluster.SecurityConfig{
			TLS:        sec.tls,
			GossipKeys: sec.keys,
		},
		TimeConfig: cluster.TimeConfig{
			MaxClockOffset: cfg.MaxClockOffset,
		},
		DutyConfig: cluster.DutyConfig{
			DefaultUser:     cfg.DefaultUser,
			DefaultPassword: cfg.DefaultPassword,
			ConsumerTimeout: consumerTimeout(cfg.ConsumerTimeout),
		},
	})
	if err != nil {
		return fmt.Errorf("start node: %w", err)
	}
	apiNode := ops.FromCluster(node)
	watermark, relative := cfg.Limits.VMMemoryHighWatermark, cfg.Limits.VMMemoryHighWatermarkRelative
	if watermark == 0 {
		if relative == 0 {
			relative = defaultMemoryRelative
		}
		watermark = relativeMemoryWatermark(relative)
	}
	memWatch := amqp.NewMemoryWatcher(amqpSrv, uint64(watermark), nil)
	diskWatch := amqp.NewDiskWatcher(amqpSrv, cfg.DataDir, uint64(cfg.Limits.DiskFreeLimit), nil)
	resources := func() ops.Resources {
		free, limit, alarm, _ := diskWatch.State()
		memUsed, memLimit, memAlarm := memWatch.State()
		return ops.Resources{MemAlarm: memAlarm, MemUsed: memUsed, MemLimit: memLimit, MemLimitRelative: relative,
			DiskAlarm: alarm, DiskFree: free, DiskFreeLimit: limit}
	}
	nodeMetrics := metrics.New(metrics.Options{Node: apiNode, Conns: amqpSrv.Connections(), Stats: ops.ClusterStats(node),
		MemoryLimit: uint64(watermark), Resources: resources, OffHeap: queue.OffHeap,
		Counters: func() ops.NodeCounters { return ops.NodeCounters(amqpSrv.Counters()) }})
	amqpBroker := broker.New(node, nodeMetrics.ObserveApply)
	amqpSrv.SetBroker(amqpBroker)

	sec.auth.SetNode(apiNode)
	peers := sec.peers()
	defer peers.Close()
	operations := ops.New(ops.Deps{Node: apiNode, Conns: amqpSrv.Connections(), Peers: peers, Logger: logger.With("component", "api"),
		Counters: func() ops.NodeCounters { return ops.NodeCounters(amqpSrv.Counters()) }, Resources: resources,
		Environment: func() []*proto.Setting { return cfg.Settings }, Intercept: amqpSrv.Intercept})
	defer operations.Close()
	amqpBroker.SetPeerConnections(operations.PeerConnections)
	proto.RegisterAdminServer(grpcSrv, grpcadmin.New(operations))
	var amqpOpen atomic.Bool
	httpSrv := &http.Server{
		Handler:           metrics.NewHandler(metrics.HandlerOptions{Node: apiNode, Metrics: nodeMetrics, Pprof: cfg.Pprof, Serving: amqpOpen.Load}),
		ReadHeaderTimeout: 5 * time.Second,
	}

	errc := make(chan error, 5)
	go func() { errc <- grpcSrv.Serve(grpcLn) }()
	go func() { errc <- httpSrv.Serve(httpLn) }()
	mgmtSrv.serve(ctx, operations, node.Ready(), logger, errc)
	// The AMQP listeners open only once the node can authenticate logins,
	// as RabbitMQ's do: a client that connects as soon as the port opens
	// must not be refused. /readyz waits for them too.
	go func() {
		if awaitServing(ctx, node) != nil {
			return
		}
		lns, err := openAMQP(amqpAddr, amqpsAddr, certs)
		if err != nil {
			errc <- err
			return
		}
		amqpOpen.Store(true)
		for _, ln := range lns {
			go func() {
				defer ln.Close() // Serve leaves it open when the server closed first
				errc <- amqpSrv.Serve(ln)
			}()
		}
	}()
	go reloadCertificates(ctx, logger, hup, certs)
	go memWatch.Run(ctx, memoryCheckInterval)
	go diskWatch.Run(ctx, diskCheckInterval)
	logger.Info("raftmq node started", "node", cfg.NodeID, "amqp", amqpAddr, "amqps", amqpsAddr,
		"grpc", grpcLn.Addr().String(), "raft", cfg.RaftAddr, "gossip", cfg.GossipAddr,
		"http", httpLn.Addr().String(), "management", mgmtSrv.addr(), "data", cfg.DataDir, "vm_memory_high_watermark", watermark,
		"disk_free_limit", uint64(cfg.Limits.DiskFreeLimit))

	var runErr error
	stopped := false
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
		stopped = true
	case runErr = <-errc:
	case <-node.Failed():
		// The node cannot apply the log (an entry of a newer version):
		// exit with its reason rather than serve a state that stopped.
		runErr = node.Err()
	}
	// Clients first, so no new command starts; then the node (it stays a
	// member of the cluster: a stop is not a leave, so a rolling restart
	// keeps every voter), then the rest.
	amqpSrv.Close()
	if stopped {
		// Asked to stop: the groups it leads need not wait for an
		// election.
		node.HandOver(handOverWait)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(shutdownCtx)
	mgmtSrv.shutdown(shutdownCtx)
	if err := node.Close(); err != nil && runErr == nil {
		runErr = err
	}
	grpcSrv.Stop()
	if errors.Is(runErr, http.ErrServerClosed) || errors.Is(runErr, grpc.ErrServerStopped) || errors.Is(runErr, net.ErrClosed) {
		runErr = nil
	}
	return runErr
}

// handOverWait bounds how long a stop waits for the groups the node leads
// to take their new leaders (cluster.Node.HandOver).
const handOverWait = 5 * time.Second

// memoryCheckInterval is how often the process's resident memory is
// compared with the memory high-water mark (RabbitMQ checks every second).
const memoryCheckInterval = time.Second

// diskCheckInterval is how often the data dir's free space is compared
// with --disk-free-limit (RabbitMQ checks every 1 to 10 s).
const diskCheckInterval = 5 * time.Second

// checkAMQPS loads the AMQPS certificate and checks its address when a
// certificate is configured (the listener opens with the AMQP one); it
// returns "" and nil otherwise.
func checkAMQPS(cfg tlsConfig) (string, *certReloader, error) {
	if cfg.Cert == "" {
		return "", nil, nil
	}
	certs, err := newCertReloader(cfg)
	if err != nil {
		return "", nil, err
	}
	addr, _, err := reserveAddr(cfg.AMQPSAddr)
	if err != nil {
		return "", nil, fmt.Errorf("AMQPS listener: %w", err)
	}
	return addr, certs, nil
}

// reloadCertificates reads the AMQPS certificate, key and CA again on each
// SIGHUP; new handshakes use them, open connections are left alone. A
// reload that fails keeps the previous files' configuration.
func reloadCertificates(ctx context.Context, logger *slog.Logger, hup <-chan os.Signal, certs *certReloader) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if certs == nil {
			logger.Info("SIGHUP: no TLS certificate configured, nothing to reload")
			continue
		}
		if err := certs.Reload(); err != nil {
			logger.Error("SIGHUP: TLS reload failed, keeping the previous certificate", "err", err)
			continue
		}
		attrs := []any{"cert", certs.cfg.Cert}
		if leaf := certs.Leaf(); leaf != nil {
			attrs = append(attrs, "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter)
		}
		logger.Info("SIGHUP: TLS certificate reloaded", attrs...)
	}
}

// consumerTimeout is the cluster's setting for --consumer-timeout ms,
// where 0 means none.
func consumerTimeout(ms int64) time.Duration {
	if ms == 0 {
		return -1
	}
	return time.Duration(min(ms, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
}
