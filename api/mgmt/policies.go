package mgmt

import (
	"net/http"
	"sort"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/proto"
)

// policyDefFromJSON reads the keys raftmq applies; the others come back in
// unknown so that the caller refuses them (the API) or reports them (an
// import).
func policyDefFromJSON(b map[string]any) (def *proto.PolicyDefinition, unknown []string, err error) {
	def = &proto.PolicyDefinition{}
	for k := range b {
		switch k {
		case "message-ttl", "expires", "max-length", "max-length-bytes", "delivery-limit", "consumer-timeout",
			"delayed-retry-min", "delayed-retry-max", "delayed-retry-multiplier":
			n, err := fieldInt(b, k, 0)
			if err != nil {
				return nil, nil, err
			}
			switch k {
			case "message-ttl":
				def.MessageTtl = &n
			case "expires":
				def.Expires = &n
			case "max-length":
				def.MaxLength = &n
			case "delivery-limit":
				def.DeliveryLimit = &n
			case "consumer-timeout":
				def.ConsumerTimeout = &n
			case "delayed-retry-min":
				def.DelayedRetryMin = &n
			case "delayed-retry-max":
				def.DelayedRetryMax = &n
			case "delayed-retry-multiplier":
				def.DelayedRetryMultiplier = &n
			default:
				def.MaxLengthBytes = &n
			}
		case "dead-letter-exchange", "dead-letter-routing-key", "overflow", "delayed-retry-type", "queue-leader-locator":
			s, err := fieldString(b, k, "")
			if err != nil {
				return nil, nil, err
			}
			switch k {
			case "dead-letter-exchange":
				def.DeadLetterExchange = &s
			case "dead-letter-routing-key":
				def.DeadLetterRoutingKey = &s
			case "delayed-retry-type":
				def.DelayedRetryType = &s
			case "queue-leader-locator":
				def.QueueLeaderLocator = &s
			default:
				def.Overflow = &s
			}
		default:
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	return def, unknown, nil
}

func policyJSON(p *proto.PolicyInfo) map[string]any {
	return map[string]any{"vhost": p.GetVhost(), "name": p.GetName(), "pattern": p.GetPattern(),
		"apply-to": p.GetApplyTo(), "definition": proto.PolicyDefinitionJSON(p.GetDefinition()), "priority": p.GetPriority()}
}

// policyFromJSON reads a policy body (PUT /api/policies/v/n, or one policy
// of a definitions file).
func policyFromJSON(vhost, name string, b map[string]any, operator bool) (*proto.SetPolicyRequest, []string, error) {
	pattern, err := fieldString(b, "pattern", "")
	if err != nil {
		return nil, nil, err
	}
	applyTo, err := fieldString(b, "apply-to", "all")
	if err != nil {
		return nil, nil, err
	}
	prio, err := fieldInt(b, "priority", 0)
	if err != nil {
		return nil, nil, err
	}
	dm, ok := b["definition"].(map[string]any)
	if !ok {
		return nil, nil, badRequest("policy definition must be an object")
	}
	def, unknown, err := policyDefFromJSON(dm)
	if err != nil {
		return nil, nil, err
	}
	return &proto.SetPolicyRequest{Vhost: vhost, Name: name, Pattern: pattern, ApplyTo: applyTo, Priority: int32(prio),
		Definition: def, Operator: operator}, unknown, nil
}

func (q *req) policies(operator bool) error {
	vhost, name := q.arg("vhost"), q.arg("name")
	if vhost != "" {
		if _, err := q.vhostArg(); err != nil {
			return err
		}
	}
	// Policymakers manage policies where they have permissions; operator
	// policies are administrators' (as in RabbitMQ).
	allowed := func(v string) bool {
		if operator {
			return q.user.admin()
		}
		_, ok := q.user.perms[v]
		return q.user.admin() || (q.user.policymaker() && ok)
	}
	switch q.r.Method {
	case http.MethodGet:
		if operator && !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		if !q.user.policymaker() && !q.user.monitor() {
			return notAuthorised("Not policymaker user")
		}
		var out []map[string]any
		q.view(func(s ops.State) {
			for _, p := range s.Policies(vhost, operator) {
				if (name == "" || p.GetName() == name) && (q.user.monitor() || allowed(p.GetVhost())) {
					out = append(out, policyJSON(p))
				}
			}
		})
		if name != "" {
			if len(out) == 0 {
				return notFound()
			}
			q.ok(out[0])
			return nil
		}
		q.list(out)
		return nil
	case http.MethodPut:
		if name == "" {
			return methodNotAllowed()
		}
		if !allowed(vhost) {
			return notAuthorised("Not policymaker user")
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		req, unknown, err := policyFromJSON(vhost, name, b, operator)
		if err != nil {
			return err
		}
		if len(unknown) > 0 {
			return badRequest("raftmq does not apply the policy keys %v", unknown)
		}
		existed := false
		q.view(func(s ops.State) {
			for _, p := range s.Policies(vhost, operator) {
				existed = existed || p.GetName() == name
			}
		})
		if _, err := q.m.ops.SetPolicy(q.ctx, req); err != nil {
			return err
		}
		q.created(existed)
		return nil
	case http.MethodDelete:
		if name == "" {
			return methodNotAllowed()
		}
		if !allowed(vhost) {
			return notAuthorised("Not policymaker user")
		}
		if _, err := q.m.ops.ClearPolicy(q.ctx, &proto.ClearPolicyRequest{Vhost: vhost, Name: name, Operator: operator}); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}
