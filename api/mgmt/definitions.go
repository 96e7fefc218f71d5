package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// honouredQueueArgs are the queue arguments raftmq acts on; others are
// kept on the queue (and exported again) but do nothing, which an import
// reports.
var honouredQueueArgs = []string{"x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes",
	"x-dead-letter-exchange", "x-dead-letter-routing-key", "x-overflow",
	"x-max-priority", "x-delivery-limit", "x-single-active-consumer", "x-consumer-timeout",
	"x-delayed-retry-type", "x-delayed-retry-min", "x-delayed-retry-max", "x-delayed-retry-multiplier"}

// honouredExchangeArgs are the exchange arguments raftmq acts on.
var honouredExchangeArgs = []string{"alternate-exchange", "x-delayed-type", "hash-header", "hash-property"}

// Export returns the definitions of the whole broker (vhost "") or of one
// vhost in RabbitMQ's format, read from this node's applied state.
func (m *Server) Export(vhost string) map[string]any {
	var (
		users, vhosts, perms, policies, params, queues, exchanges, bindings []map[string]any
	)
	scoped := vhost != ""
	withVhost := func(o map[string]any, v string) map[string]any {
		if !scoped {
			o["vhost"] = v
		}
		return o
	}
	m.node.View(func(s ops.State) {
		if !scoped {
			for _, u := range s.Users() {
				j := userJSON(s, u)
				users = append(users, j)
			}
			for _, v := range s.Vhosts() {
				vhosts = append(vhosts, map[string]any{"name": v.GetName()})
			}
			for _, p := range s.Permissions() {
				perms = append(perms, permissionJSON(p))
			}
		}
		for _, p := range s.Policies(vhost, false) {
			o := map[string]any{"name": p.GetName(), "pattern": p.GetPattern(), "apply-to": p.GetApplyTo(),
				"definition": proto.PolicyDefinitionJSON(p.GetDefinition()), "priority": p.GetPriority()}
			policies = append(policies, withVhost(o, p.GetVhost()))
		}
		for _, p := range s.Policies(vhost, true) {
			o := map[string]any{"component": "operator_policy", "name": p.GetName(), "value": map[string]any{
				"pattern": p.GetPattern(), "apply-to": p.GetApplyTo(), "definition": proto.PolicyDefinitionJSON(p.GetDefinition()),
				"priority": p.GetPriority()}}
			params = append(params, withVhost(o, p.GetVhost()))
		}
		// RabbitMQ keeps a vhost's limits as its runtime parameter
		// "limits" of component vhost-limits, and exports them so.
		for _, l := range s.VhostLimits(vhost) {
			o := vhostLimitsJSON(l)
			delete(o, "vhost")
			o["component"], o["name"] = "vhost-limits", "limits"
			params = append(params, withVhost(o, l.GetVhost()))
		}
		for _, x := range s.Queues(vhost) {
			// Exclusive queues belong to a connection and are not
			// definitions, as in RabbitMQ's export.
			if x.GetExclusive() {
				continue
			}
			o := map[string]any{"name": x.GetName(), "durable": x.GetDurable(), "auto_delete": x.GetAutoDelete(),
				"arguments": proto.TableJSON(x.GetArguments())}
			queues = append(queues, withVhost(o, x.GetVhost()))
		}
		for _, x := range s.Exchanges(vhost) {
			if x.GetName() == "" || strings.HasPrefix(x.GetName(), "amq.") {
				continue
			}
			o := map[string]any{"name": x.GetName(), "type": x.GetType(), "durable": x.GetDurable(),
				"auto_delete": x.GetAutoDelete(), "internal": x.GetInternal(), "arguments": proto.TableJSON(x.GetArguments())}
			exchanges = append(exchanges, withVhost(o, x.GetVhost()))
		}
		for _, b := range s.Bindings(vhost) {
			if b.GetSource() == "" {
				continue
			}
			o := map[string]any{"source": b.GetSource(), "destination": b.GetDestination(),
				"destination_type": b.GetDestinationKind(), "routing_key": b.GetRoutingKey(), "arguments": proto.TableJSON(b.GetArguments())}
			bindings = append(bindings, withVhost(o, b.GetVhost()))
		}
	})
	out := map[string]any{
		"rabbit_version": ops.CompatVersion, "rabbitmq_version": ops.CompatVersion,
		"product_name": "raftmq", "product_version": ops.ProductVersion(),
		"policies": nonNil(policies), "parameters": nonNil(params),
		"queues": nonNil(queues), "exchanges": nonNil(exchanges), "bindings": nonNil(bindings),
	}
	if !scoped {
		out["users"] = nonNil(users)
		out["vhosts"] = nonNil(vhosts)
		out["permissions"] = nonNil(perms)
		out["topic_permissions"] = []any{}
		out["global_parameters"] = []any{map[string]any{"name": "cluster_name", "value": m.cluster}}
	}
	return out
}

// ImportResult is what an import did beyond applying the file: warnings
// about what raftmq keeps but does not act on, or leaves out, one per
// object; and errors of objects that could not be applied.
type ImportResult struct {
	Warnings []string `json:"warnings"`
	Errors   []string `json:"errors,omitempty"`
}

// Import applies definitions in RabbitMQ's format through the log: vhosts,
// users (with their password hashes as given), permissions, policies and
// operator policies, exchanges, queues, then bindings. Every write is
// idempotent, so importing a file twice changes nothing the second time.
// vhost, when set, is where objects without a vhost go (the per-vhost
// route).
func (m *Server) Import(ctx context.Context, defs map[string]any, vhost string) *ImportResult {
	res := &ImportResult{Warnings: []string{}}
	warn := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		res.Warnings = append(res.Warnings, msg)
		m.log.Warn("definitions import: " + msg)
	}
	fail := func(what string, err error) {
		msg := fmt.Sprintf("%s: %v", what, fromError(err).reason)
		res.Errors = append(res.Errors, msg)
		m.log.Error("definitions import: " + msg)
	}
	list := func(key string) []map[string]any {
		raw, _ := defs[key].([]any)
		var out []map[string]any
		for _, e := range raw {
			if o, ok := e.(map[string]any); ok {
				out = append(out, o)
			}
		}
		return out
	}
	// A vhost's definitions go to that vhost whatever their objects say,
	// and carry only its topology, as in RabbitMQ.
	vhostOf := func(o map[string]any) string {
		if vhost != "" {
			return vhost
		}
		if v, ok := o["vhost"].(string); ok && v != "" {
			return v
		}
		return ops.DefaultVhost
	}
	if vhost != "" {
		for _, k := range []string{"users", "vhosts", "permissions", "topic_permissions", "global_parameters"} {
			if len(list(k)) > 0 {
				warn("%s are not imported through the definitions of vhost '%s'", k, vhost)
				delete(defs, k)
			}
		}
	}
	str := func(o map[string]any, k string) string { s, _ := fieldString(o, k, ""); return s }
	// setLimits replaces a vhost's limits with those of value, as
	// RabbitMQ's vhost-limits parameter holds them.
	setLimits := func(v string, value map[string]any) {
		set, unknown, err := limitsFromJSON(value)
		if err != nil {
			fail(fmt.Sprintf("limits of vhost '%s'", v), err)
			return
		}
		if len(unknown) > 0 {
			warn("limits of vhost '%s': %v are not limits raftmq knows and were left out", v, unknown)
		}
		if _, err := m.ops.SetVhostLimits(ctx, &proto.SetVhostLimitsRequest{Vhost: v, Replace: true, Set: set}); err != nil {
			fail(fmt.Sprintf("limits of vhost '%s'", v), err)
		}
	}

	for _, v := range list("vhosts") {
		name := str(v, "name")
		desc := str(v, "description")
		if md, ok := v["metadata"].(map[string]any); ok && desc == "" {
			desc, _ = md["description"].(string)
		}
		if _, err := m.ops.AddVhost(ctx, &proto.AddVhostRequest{Name: name, Description: desc}); err != nil {
			fail("vhost '"+name+"'", err)
			continue
		}
		if l, ok := v["limits"].(map[string]any); ok && len(l) > 0 {
			setLimits(name, l)
		}
	}
	for _, u := range list("users") {
		name := str(u, "name")
		if l, ok := u["limits"].(map[string]any); ok && len(l) > 0 {
			warn("user '%s': limits %v are not applied", name, keysOf(l))
		}
		if alg := str(u, "hashing_algorithm"); alg != "" && alg != fsm.PasswordHashAlgorithm {
			warn("user '%s' skipped: its password hash uses %s, raftmq checks %s only", name, alg, fsm.PasswordHashAlgorithm)
			continue
		}
		if _, err := m.putUser(ctx, name, u); err != nil {
			fail("user '"+name+"'", err)
		}
	}
	for _, p := range list("permissions") {
		user, v := str(p, "user"), vhostOf(p)
		if _, err := m.putPermission(ctx, v, user, p); err != nil {
			fail(fmt.Sprintf("permissions of '%s' in vhost '%s'", user, v), err)
		}
	}
	for _, p := range list("topic_permissions") {
		warn("topic permissions of '%s' in vhost '%s' are not imported: raftmq has no topic permissions", str(p, "user"), vhostOf(p))
	}
	setPolicy := func(o map[string]any, v, name string, operator bool) {
		kind := "policy"
		if operator {
			kind = "operator policy"
		}
		req, unknown, err := policyFromJSON(v, name, o, operator)
		if err != nil {
			fail(fmt.Sprintf("%s '%s' in vhost '%s'", kind, name, v), err)
			return
		}
		if len(unknown) > 0 {
			warn("%s '%s' in vhost '%s': keys %v are not applied by raftmq and were left out", kind, name, v, unknown)
			if len(proto.PolicyDefinitionJSON(req.GetDefinition())) == 0 {
				warn("%s '%s' in vhost '%s' skipped: nothing raftmq applies is left", kind, name, v)
				return
			}
		}
		if _, err := m.ops.SetPolicy(ctx, req); err != nil {
			fail(fmt.Sprintf("%s '%s' in vhost '%s'", kind, name, v), err)
		}
	}
	for _, p := range list("policies") {
		setPolicy(p, vhostOf(p), str(p, "name"), false)
	}
	for _, p := range list("parameters") {
		comp, name, v := str(p, "component"), str(p, "name"), vhostOf(p)
		val, _ := p["value"].(map[string]any)
		if comp == "vhost-limits" && val != nil {
			setLimits(v, val)
			continue
		}
		if comp != "operator_policy" || val == nil {
			warn("parameter '%s' of component '%s' in vhost '%s' is not imported: raftmq has no %s", name, comp, v, comp)
			continue
		}
		setPolicy(val, v, name, true)
	}
	for _, g := range list("global_parameters") {
		name := str(g, "name")
		if name == "cluster_name" {
			if val, _ := g["value"].(string); val == m.cluster {
				continue
			}
		}
		warn("global parameter '%s' is not imported: raftmq keeps no global parameters", name)
	}
	for _, x := range list("exchanges") {
		name, v := str(x, "name"), vhostOf(x)
		d, err := exchangeDeclareFromJSON(v, name, x)
		if err != nil {
			fail(fmt.Sprintf("exchange '%s' in vhost '%s'", name, v), err)
			continue
		}
		if extra := unhonoured(d.GetArguments(), honouredExchangeArgs); len(extra) > 0 {
			warn("exchange '%s' in vhost '%s': arguments %v are kept but not applied by raftmq", name, v, extra)
		}
		if err := m.ops.DeclareExchange(ctx, d); err != nil {
			fail(fmt.Sprintf("exchange '%s' in vhost '%s'", name, v), err)
		}
	}
	for _, x := range list("queues") {
		name, v := str(x, "name"), vhostOf(x)
		d, err := queueDeclareFromJSON(v, name, x)
		if err != nil {
			fail(fmt.Sprintf("queue '%s' in vhost '%s'", name, v), err)
			continue
		}
		extra := unhonoured(d.GetArguments(), honouredQueueArgs)
		extra = slices.DeleteFunc(extra, func(k string) bool {
			if k != "x-queue-type" {
				return false
			}
			// Every raftmq queue is replicated through the raft log: a
			// classic or quorum queue is what it is anyway.
			t, _ := proto.TableJSON(d.GetArguments())[k].(string)
			return t == "classic" || t == "quorum"
		})
		if len(extra) > 0 {
			warn("queue '%s' in vhost '%s': arguments %v are kept but not applied by raftmq", name, v, extra)
		}
		if _, err := m.ops.DeclareQueue(ctx, d); err != nil {
			fail(fmt.Sprintf("queue '%s' in vhost '%s'", name, v), err)
		}
	}
	for _, b := range list("bindings") {
		v := vhostOf(b)
		src, dst, kind := str(b, "source"), str(b, "destination"), str(b, "destination_type")
		what := fmt.Sprintf("binding of %s '%s' to exchange '%s' in vhost '%s'", kind, dst, src, v)
		rk := str(b, "routing_key")
		args, err := fieldTable(b, "arguments")
		if err != nil {
			fail(what, err)
			continue
		}
		if kind != "queue" && kind != "exchange" {
			fail(what, badRequest("destination_type must be queue or exchange"))
			continue
		}
		if err := m.ops.Bind(ctx, &proto.Bind{Vhost: v, Source: src, Destination: dst, DestinationIsExchange: kind == "exchange",
			RoutingKey: rk, Arguments: args}); err != nil {
			fail(what, err)
		}
	}
	return res
}

// limitsFromJSON reads a vhost's limits, {"max-connections": n, ...}:
// the names raftmq does not know come back in unknown.
func limitsFromJSON(value map[string]any) (set []*proto.VhostLimit, unknown []string, err error) {
	for _, k := range keysOf(value) {
		if !fsm.KnownLimit(k) {
			unknown = append(unknown, k)
			continue
		}
		n, err := fieldInt(value, k, 0)
		if err != nil {
			return nil, nil, err
		}
		set = append(set, &proto.VhostLimit{Name: k, Value: n})
	}
	return set, unknown, nil
}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// unhonoured lists the keys of args raftmq does not act on.
func unhonoured(args *proto.Table, honoured []string) []string {
	var out []string
	for _, f := range args.GetFields() {
		if !slices.Contains(honoured, f.GetKey()) {
			out = append(out, f.GetKey())
		}
	}
	return out
}

// ParseDefinitions reads a definitions document.
func ParseDefinitions(r io.Reader) (map[string]any, error) {
	d := json.NewDecoder(r)
	d.UseNumber()
	var defs map[string]any
	if err := d.Decode(&defs); err != nil {
		return nil, fmt.Errorf("definitions are not a JSON object: %w", err)
	}
	return defs, nil
}

// LoadDefinitions imports a definitions file at boot (--load-definitions),
// logging each warning and failing on the first error list.
func (m *Server) LoadDefinitions(ctx context.Context, data []byte, log *slog.Logger) error {
	defs, err := ParseDefinitions(bytes.NewReader(data))
	if err != nil {
		return err
	}
	res := m.Import(ctx, defs, "")
	if len(res.Errors) > 0 {
		return fmt.Errorf("definitions: %d objects could not be applied: %s", len(res.Errors), strings.Join(res.Errors, "; "))
	}
	log.Info("definitions loaded", "warnings", len(res.Warnings))
	return nil
}

func (q *req) definitions() error {
	if !q.user.admin() {
		return notAuthorised("Not administrator user")
	}
	vhost, err := q.vhostScope()
	if err != nil {
		return err
	}
	switch q.r.Method {
	case http.MethodGet:
		q.ok(q.m.Export(vhost))
		return nil
	case http.MethodPost:
		raw, err := io.ReadAll(q.r.Body)
		if err != nil {
			return badRequest("reading the body: %v", err)
		}
		defs, err := ParseDefinitions(bytes.NewReader(raw))
		if err != nil {
			return badRequest("%v", err)
		}
		res := q.m.Import(q.ctx, defs, vhost)
		if len(res.Errors) > 0 {
			writeJSON(q.w, http.StatusBadRequest, map[string]any{"error": "bad_request",
				"reason": strings.Join(res.Errors, "; "), "warnings": res.Warnings, "errors": res.Errors})
			return nil
		}
		q.ok(res)
		return nil
	}
	return methodNotAllowed()
}
