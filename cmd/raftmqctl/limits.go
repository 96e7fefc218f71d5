package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/raftmq/raftmq/proto"
)

// Virtual host limits, as rabbitmqctl's set_vhost_limits,
// clear_vhost_limits and list_vhost_limits.

func init() {
	verbs["set_vhost_limits"] = verb{args: "[-p vhost] DEFINITION", min: 1, max: 1, pre: checkLimits, run: setVhostLimits,
		help: "Sets the vhost's limits to DEFINITION, a JSON object such as\n" +
			`'{"max-connections": 256, "max-queues": 1024}': the limits it leaves out are cleared.` + "\n" +
			"A negative value is no limit, 0 refuses every new connection or queue."}
	verbs["clear_vhost_limits"] = verb{args: "[-p vhost]", max: 0, run: clearVhostLimits}
	verbs["list_vhost_limits"] = verb{args: "[-p vhost] [--global]", max: 0, run: listVhostLimits,
		help: "The vhost's limits, one a row; with --global, those of every vhost that has some."}
}

// parseLimits reads a limits definition: names to integers. The node
// refuses a name it does not know.
func parseLimits(s string) ([]*proto.VhostLimit, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("vhost limits %s: %v (want a JSON object of integers)", s, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("vhost limits %s: trailing data", s)
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]*proto.VhostLimit, 0, len(m))
	for _, k := range names {
		num, _ := m[k].(json.Number)
		n, err := num.Int64()
		if err != nil {
			return nil, fmt.Errorf("vhost limits %s: %s must be an integer, got %v", s, k, m[k])
		}
		out = append(out, &proto.VhostLimit{Name: k, Value: n})
	}
	return out, nil
}

func checkLimits(_ *options, args []string) error {
	if _, err := parseLimits(args[0]); err != nil {
		return usagef("%v", err)
	}
	return nil
}

func setVhostLimits(c *call) error {
	set, err := parseLimits(c.args[0])
	if err != nil {
		return usagef("%v", err)
	}
	if _, err := c.c.SetVhostLimits(c.ctx, &proto.SetVhostLimitsRequest{Vhost: c.o.vhost, Replace: true, Set: set}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Set the limits of vhost %q to %s", c.o.vhost, limitsText(set)), nil)
}

func clearVhostLimits(c *call) error {
	if _, err := c.c.SetVhostLimits(c.ctx, &proto.SetVhostLimitsRequest{Vhost: c.o.vhost, Replace: true}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Cleared the limits of vhost %q", c.o.vhost), nil)
}

// limitsText renders limits as the JSON object they were given as.
func limitsText(ls []*proto.VhostLimit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%q:%d", l.GetName(), l.GetValue())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

var limitColumns = []column[*proto.VhostLimit]{
	{"limit", func(l *proto.VhostLimit) any { return l.GetName() }},
	{"value", func(l *proto.VhostLimit) any { return l.GetValue() }},
}

var globalLimitColumns = []column[*proto.VhostLimitsInfo]{
	{"vhost", func(v *proto.VhostLimitsInfo) any { return v.GetVhost() }},
	{"limits", func(v *proto.VhostLimitsInfo) any { return limitsText(v.GetLimits()) }},
}

func listVhostLimits(c *call) error {
	vhost := c.o.vhost
	if c.o.global {
		vhost = ""
	}
	r, err := c.c.ListVhostLimits(c.ctx, &proto.ListVhostLimitsRequest{Vhost: vhost, Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	if c.o.global {
		c.inform("Listing limits for all vhosts ...")
		return listing(c, r.GetVhosts(), globalLimitColumns, []string{"vhost", "limits"})
	}
	c.inform("Listing limits for vhost %q ...", c.o.vhost)
	var ls []*proto.VhostLimit
	for _, v := range r.GetVhosts() {
		ls = append(ls, v.GetLimits()...)
	}
	return listing(c, ls, limitColumns, []string{"limit", "value"})
}
