package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/proto"
)

// The node verbs: status, ping and await_startup, from ClusterStatus, the
// one call every node answers from its own state.

func init() {
	verbs["status"] = verb{max: 0, run: nodeStatus,
		help: "As rabbitmqctl status: the node's OS PID, uptime and version, its raft state, its\n" +
			"alarms, its resident memory against the memory high watermark (what the memory alarm\n" +
			"compares), file descriptors, free disk space and listeners. Figures in gb are 10^9 bytes."}
	verbs["ping"] = verb{max: 0, run: ping,
		help: "Exit 0 when the node answers, 69 when it does not within -t."}
	verbs["await_startup"] = verb{max: 0, run: awaitStartup,
		help: "Wait until the node answers and is ready: it knows a leader and has applied the\n" +
			"cluster's log. Exit 0 then, 69 when -t runs out first."}
}

// listener is one address a node serves.
type listener struct {
	Protocol string `json:"protocol"`
	Address  string `json:"address"`
}

func nodeStatus(c *call) error {
	c.inform("Status of node %s ...", c.o.node)
	r, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	var self *proto.NodeStatus
	for _, n := range r.GetNodes() {
		if n.GetId() == r.GetNodeId() {
			self = n
		}
	}
	var ls []listener
	if self != nil {
		for _, l := range []listener{{"amqp", self.GetAmqpAddr()}, {"grpc", self.GetGrpcAddr()}, {"raft", self.GetRaftAddr()}} {
			if l.Address != "" {
				ls = append(ls, l)
			}
		}
	}
	members := make([]string, 0, len(r.GetNodes()))
	for _, n := range r.GetNodes() {
		members = append(members, n.GetId())
	}
	sort.Strings(members)
	alarms := append([]string{}, r.GetAlarms()...)
	if c.o.json {
		return writeJSON(c.out, map[string]any{
			"node_id": r.GetNodeId(), "raft_state": r.GetRaftState(), "term": r.GetTerm(),
			"leader_id": r.GetLeaderId(), "leader_addr": r.GetLeaderAddr(),
			"applied_index": r.GetAppliedIndex(), "listeners": ls, "members": members,
			"raftmq_version": r.GetVersion(), "uptime": r.GetUptimeMs() / 1000, "pid": r.GetOsPid(),
			"alarms": alarms,
			// rabbitmqctl status --formatter json's keys for the memory
			// figures, in bytes.
			"memory":                           map[string]any{"total": map[string]any{"rss": r.GetMemUsed()}, "strategy": "rss"},
			"vm_memory_high_watermark_limit":   r.GetMemLimit(),
			"vm_memory_high_watermark_setting": watermarkSetting(r),
			"disk_free":                        r.GetDiskFree(), "disk_free_limit": r.GetDiskFreeLimit(),
			"file_descriptors": map[string]any{"total_used": r.GetFdUsed(), "total_limit": r.GetFdTotal()},
			"processors":       r.GetProcessors(), "goroutines": r.GetGoroutines(),
		})
	}
	leader := r.GetLeaderId()
	if leader == "" {
		leader = "(none)"
	}
	// rabbitmqctl status's sections and wording, with the raft state in
	// place of Erlang's.
	w := &sectionWriter{w: c.out}
	w.section("Runtime")
	w.line("OS PID: %d", r.GetOsPid())
	w.line("Uptime (seconds): %d", r.GetUptimeMs()/1000)
	w.line("raftmq version: %s", r.GetVersion())
	w.line("Node name: %s", r.GetNodeId())
	w.line("Processors: %d", r.GetProcessors())
	w.line("Goroutines: %d", r.GetGoroutines())
	w.section("Raft")
	w.line("Raft state: %s (term %d, applied index %d)", r.GetRaftState(), r.GetTerm(), r.GetAppliedIndex())
	w.line("Leader: %s", leader)
	w.line("Cluster members: %d", len(members))
	w.section("Alarms")
	if len(alarms) == 0 {
		w.line("(none)")
	}
	for _, a := range alarms {
		switch a {
		case "memory":
			w.line("Memory alarm on node %s", r.GetNodeId())
		case "disk":
			w.line("Free disk space alarm on node %s", r.GetNodeId())
		default:
			w.line("%s alarm on node %s", a, r.GetNodeId())
		}
	}
	w.section("Memory")
	w.line("Total memory used: %s", gb(r.GetMemUsed()))
	w.line("Calculation strategy: rss")
	if rel := r.GetMemLimitRelative(); rel > 0 {
		w.line("Memory high watermark setting: %s of available memory, computed to: %s", strconv.FormatFloat(rel, 'g', -1, 64), gb(r.GetMemLimit()))
	} else {
		w.line("Memory high watermark setting: %s, computed to: %s", gb(r.GetMemLimit()), gb(r.GetMemLimit()))
	}
	w.section("File Descriptors")
	w.line("Total: %d, limit: %d", r.GetFdUsed(), r.GetFdTotal())
	w.section("Free Disk Space")
	w.line("Low free disk space watermark: %s", gb(r.GetDiskFreeLimit()))
	w.line("Free disk space: %s", gb(r.GetDiskFree()))
	w.section("Listeners")
	for _, l := range ls {
		host, port := splitHostPort(l.Address)
		w.line("Interface: %s, port: %s, protocol: %s, purpose: %s", host, port, l.Protocol, listenerPurpose[l.Protocol])
	}
	return w.err
}

// watermarkSetting is rabbitmqctl status --formatter json's
// vm_memory_high_watermark_setting: the fraction given, or the bytes.
func watermarkSetting(r *proto.ClusterStatusResponse) map[string]any {
	if rel := r.GetMemLimitRelative(); rel > 0 {
		return map[string]any{"relative": rel}
	}
	return map[string]any{"absolute": r.GetMemLimit()}
}

// listenerPurpose is what rabbitmqctl status says each listener is for.
var listenerPurpose = map[string]string{
	"amqp": "AMQP 0-9-1",
	"grpc": "admin API (raftmqctl)",
	"raft": "raft log replication between nodes",
}

// gb is a byte count as rabbitmqctl status prints it by default (its
// --unit gb: 10^9 bytes, four decimals).
func gb(n uint64) string { return fmt.Sprintf("%.4f gb", float64(n)/1e9) }

// sectionWriter prints rabbitmqctl status's titled sections, each
// separated from the previous by a blank line, and keeps the first error.
type sectionWriter struct {
	w     io.Writer
	begun bool
	err   error
}

func (s *sectionWriter) section(title string) {
	if s.begun {
		s.line("")
	}
	s.begun = true
	s.line("%s\n", title)
}

func (s *sectionWriter) line(format string, args ...any) {
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.w, format+"\n", args...)
	}
}

func ping(c *call) error {
	c.inform("Will ping %s. This only checks that the node answers.", c.o.node)
	if _, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{}); err != nil {
		return exitError{exitUnavailable, fmt.Sprintf("ping of %s failed: %s", c.o.node, status.Convert(err).Message())}
	}
	return c.done("Ping succeeded", nil)
}

// awaitPoll is how often await_startup asks a node that is not ready.
var awaitPoll = 200 * time.Millisecond

func awaitStartup(c *call) error {
	c.inform("Waiting for %s to start ...", c.o.node)
	const noAnswer = "no answer"
	last := noAnswer
	for {
		r, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{})
		switch {
		case err != nil && status.Code(err) == codes.DeadlineExceeded && last != noAnswer:
			// The deadline cut this call short (the server may say so
			// before our context does): the reason to report is the
			// previous answer's.
		case err != nil:
			last = status.Convert(err).Message()
		case r.GetLeaderId() == "":
			last = "no leader is known"
		case r.GetAppliedIndex() == 0:
			// A node that knows a leader but has applied nothing does
			// not hold the cluster's users yet and refuses logins.
			last = "the node has not applied the cluster's log"
		default:
			return c.done(fmt.Sprintf("Node %s is ready", r.GetNodeId()), map[string]any{"node_id": r.GetNodeId()})
		}
		select {
		case <-c.ctx.Done():
			return exitError{exitUnavailable, fmt.Sprintf("%s did not start within %v: %s", c.o.node, c.o.timeout, last)}
		case <-time.After(awaitPoll):
		}
	}
}

func init() {
	verbs["environment"] = verb{args: "[column ...]", max: -1, run: environment,
		columns: columnNames(settingColumns), defaults: []string{"name", "value"},
		help: "The node's settings: every raftmq flag with the value the node runs with (from its command\n" +
			"line, its environment or the default). Secrets (--cluster-secret, --default-password,\n" +
			"--gossip-key) show only <set>."}
}

var settingColumns = []column[*proto.Setting]{
	{"name", func(s *proto.Setting) any { return s.GetName() }},
	{"value", func(s *proto.Setting) any { return s.GetValue() }},
}

func environment(c *call) error {
	r, err := c.c.Environment(c.ctx, &proto.EnvironmentRequest{})
	if err != nil {
		return err
	}
	c.inform("Application environment of node %s ...", r.GetNodeId())
	return listing(c, r.GetSettings(), settingColumns, []string{"name", "value"})
}
