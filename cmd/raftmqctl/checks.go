package main

import (
	"fmt"
	"net"
	"strings"

	"github.com/raftmq/raftmq/proto"
)

// rabbitmq-diagnostics' health checks, from ClusterStatus: exit 0 when the
// check passes, 69 with the reason when it fails, as rabbitmq-diagnostics.

func init() {
	verbs["check_running"] = verb{max: 0, run: checkRunning,
		help: "Passes when the node knows a leader and has applied the cluster's log (what await_startup\n" +
			"waits for); fails with exit 69 otherwise."}
	verbs["check_local_alarms"] = verb{max: 0, run: checkLocalAlarms,
		help: "Passes when the node has raised no resource alarm (memory, disk); fails with exit 69 naming them."}
	verbs["check_port_connectivity"] = verb{max: 0, run: checkPortConnectivity,
		help: "Opens a TCP connection to each of the node's listeners (AMQP, gRPC, raft) from this machine;\n" +
			"a listener on every interface is reached at --node's host. Fails with exit 69 naming those\n" +
			"that refuse."}
}

func checkFailed(format string, args ...any) error {
	return rabbitError{exitUnavailable, "Error:\n" + fmt.Sprintf(format, args...)}
}

func checkRunning(c *call) error {
	c.inform("Checking if raftmq is running on node %s ...", c.o.node)
	r, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{})
	if err != nil {
		return err
	}
	why := ""
	switch {
	case r.GetLeaderId() == "":
		why = "no leader is known"
	case r.GetAppliedIndex() == 0:
		why = "the node has not applied the cluster's log"
	}
	if why != "" {
		return checkFailed("raftmq on node %s is not running or has not fully booted yet: %s", r.GetNodeId(), why)
	}
	msg := fmt.Sprintf("raftmq on node %s is fully booted and running", r.GetNodeId())
	if c.o.json {
		return writeJSON(c.out, map[string]any{"message": msg})
	}
	_, err = fmt.Fprintln(c.out, msg)
	return err
}

func checkLocalAlarms(c *call) error {
	c.inform("Asking node %s to report any local resource alarms ...", c.o.node)
	r, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{})
	if err != nil {
		return err
	}
	if a := r.GetAlarms(); len(a) > 0 {
		if c.o.json {
			// rabbitmq-diagnostics prints the failed check's document and exits 69.
			_ = writeJSON(c.out, map[string]any{"result": "error", "local_alarms": a})
			return rabbitError{exitUnavailable, ""}
		}
		return checkFailed("Node %s reported local alarms: %s", r.GetNodeId(), strings.Join(a, ", "))
	}
	if c.o.json {
		return writeJSON(c.out, map[string]any{"result": "ok"})
	}
	_, err = fmt.Fprintf(c.out, "Node %s reported no local alarms\n", r.GetNodeId())
	return err
}

// portListener is one listener check_port_connectivity tries.
type portListener struct {
	Interface string `json:"interface"`
	Node      string `json:"node"`
	Port      string `json:"port"`
	Protocol  string `json:"protocol"`
	Purpose   string `json:"purpose"`
	addr      string
}

func checkPortConnectivity(c *call) error {
	c.inform("Testing TCP connections to all active listeners on node %s ...", c.o.node)
	r, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{})
	if err != nil {
		return err
	}
	var self *proto.NodeStatus
	for _, n := range r.GetNodes() {
		if n.GetId() == r.GetNodeId() {
			self = n
		}
	}
	if self == nil {
		return checkFailed("node %s does not list itself among the cluster's members", r.GetNodeId())
	}
	nodeHost, _, _ := net.SplitHostPort(c.o.node)
	var ls []portListener
	for _, l := range []struct{ proto, purpose, addr string }{
		{"amqp", "AMQP 0-9-1", self.GetAmqpAddr()},
		{"grpc", "admin API and forwarding between nodes", self.GetGrpcAddr()},
		{"raft", "raft log replication", self.GetRaftAddr()},
	} {
		host, port, err := net.SplitHostPort(l.addr)
		if err != nil {
			continue
		}
		dial := l.addr
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			dial = net.JoinHostPort(nodeHost, port)
		}
		ls = append(ls, portListener{Interface: host, Node: r.GetNodeId(), Port: port, Protocol: l.proto, Purpose: l.purpose, addr: dial})
	}
	var ports, failed []string
	var d net.Dialer
	for _, l := range ls {
		conn, err := d.DialContext(c.ctx, "tcp", l.addr)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%s): %v", l.addr, l.Protocol, err))
			continue
		}
		conn.Close()
		ports = append(ports, l.Port)
	}
	if len(failed) > 0 {
		return checkFailed("Connection to ports of the following listeners on node %s failed:\n  %s", r.GetNodeId(), strings.Join(failed, "\n  "))
	}
	if c.o.json {
		return writeJSON(c.out, map[string]any{"result": "ok", "node": r.GetNodeId(), "listeners": ls})
	}
	_, err = fmt.Fprintf(c.out, "Successfully connected to ports %s on node %s.\n", strings.Join(ports, ", "), r.GetNodeId())
	return err
}
