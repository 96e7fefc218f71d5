package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/raftmq/raftmq/proto"
)

// report is rabbitmqctl's report: the node's status, the cluster's, and
// every listing an operator attaches to a support request, each under the
// heading rabbitmqctl gives it.

func init() {
	verbs["report"] = verb{max: 0, run: report,
		help: "status, cluster_status, list_connections, list_channels, environment, and for every vhost list_queues,\n" +
			"list_exchanges, list_bindings, list_permissions and list_policies, each with its default\n" +
			"columns under its heading. With --formatter json: one document keyed by section."}
}

// reportSection is one part of the report.
type reportSection struct {
	key, heading string
	vhost        string // "" for the node and cluster sections
	run          func(c *call) error
}

func report(c *call) error {
	r, err := c.c.ListVhosts(c.ctx, &proto.ListRequest{Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	node := c.o.node
	sections := []reportSection{
		{"status", "Status of node " + node + " ...", "", nodeStatus},
		{"cluster_status", "Cluster status of node " + node + " ...", "", clusterStatus},
		{"connections", "Listing connections ...", "", listConnections},
		{"channels", "Listing channels ...", "", listChannels},
		{"environment", "Application environment of node " + node + " ...", "", environment},
	}
	for _, v := range r.GetVhosts() {
		vh := v.GetName()
		sections = append(sections,
			reportSection{"queues", "Listing queues for vhost " + vh + " ...", vh, listQueues},
			reportSection{"exchanges", "Listing exchanges for vhost " + vh + " ...", vh, listExchanges},
			reportSection{"bindings", "Listing bindings for vhost " + vh + " ...", vh, listBindings},
			reportSection{"permissions", fmt.Sprintf("Listing permissions for vhost %q ...", vh), vh, listPermissions},
			reportSection{"policies", fmt.Sprintf("Listing policies for vhost %q ...", vh), vh, listPolicies(false)},
		)
	}
	c.inform("Reporting server status of node %s ...", node)
	doc := map[string]any{}
	perVhost := map[string]map[string]json.RawMessage{}
	for i, s := range sections {
		o := *c.o
		o.quiet = true
		if s.vhost != "" {
			o.vhost = s.vhost
		}
		var buf bytes.Buffer
		sub := &call{ctx: c.ctx, c: c.c, o: &o, out: &buf}
		if err := s.run(sub); err != nil {
			return err
		}
		if c.o.json {
			raw := json.RawMessage(bytes.TrimSpace(buf.Bytes()))
			if s.vhost == "" {
				doc[s.key] = raw
				continue
			}
			if perVhost[s.vhost] == nil {
				perVhost[s.vhost] = map[string]json.RawMessage{}
			}
			perVhost[s.vhost][s.key] = raw
			continue
		}
		if i > 0 {
			fmt.Fprintln(c.out)
		}
		fmt.Fprintln(c.out, s.heading)
		if _, err := c.out.Write(buf.Bytes()); err != nil {
			return err
		}
	}
	if c.o.json {
		doc["vhosts"] = perVhost
		return writeJSON(c.out, doc)
	}
	return nil
}
