package fsm

import (
	"regexp"

	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

func validatePolicy(c *proto.PolicySet) (*regexp.Regexp, *proto.Result) {
	re, err := regexp.Compile(c.GetPattern())
	if err != nil {
		return nil, refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid pattern '"+c.GetPattern()+"'")
	}
	switch c.GetApplyTo() {
	case "", "queues", "exchanges", "all":
	default:
		return nil, refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid apply-to '"+c.GetApplyTo()+"'")
	}
	d := c.GetDefinition()
	if d == nil {
		d = &proto.PolicyDefinition{}
	}
	if d.MessageTtl != nil {
		if err := ttl.PolicyMessageTTL(d.GetMessageTtl()); err != nil {
			return nil, ttlRefusal(err)
		}
	}
	if d.Expires != nil {
		if err := ttl.PolicyExpires(d.GetExpires()); err != nil {
			return nil, ttlRefusal(err)
		}
	}
	if (d.MaxLength != nil && d.GetMaxLength() < 0) || (d.MaxLengthBytes != nil && d.GetMaxLengthBytes() < 0) {
		return nil, refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid max-length")
	}
	if d.DeliveryLimit != nil && d.GetDeliveryLimit() < -1 {
		return nil, refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid delivery-limit")
	}
	if d.Overflow != nil {
		switch d.GetOverflow() {
		case "drop-head", "reject-publish", "reject-publish-dlx":
		default:
			return nil, refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid overflow '"+d.GetOverflow()+"'")
		}
	}
	return re, nil
}

func (s *state) applyPolicySet(c *proto.PolicySet) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	re, r := validatePolicy(c)
	if r != nil {
		return r
	}
	if d := c.GetDefinition(); s.atLeast(levelConsumerTimeout) && d != nil && d.ConsumerTimeout != nil && d.GetConsumerTimeout() < 0 {
		return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid consumer-timeout")
	}
	if s.atLeast(levelRetry) {
		if r := checkRetryPolicy(c.GetDefinition()); r != nil {
			return r
		}
	}
	if s.atLeast(levelLocatorPolicy) {
		if r := checkLocatorPolicy(c.GetDefinition()); r != nil {
			return r
		}
	}
	p := &policy{def: pb.Clone(c).(*proto.PolicySet), re: re}
	if p.def.Definition == nil {
		p.def.Definition = &proto.PolicyDefinition{}
	}
	if c.GetOperator() {
		v.operator[c.GetName()] = p
	} else {
		v.policies[c.GetName()] = p
	}
	s.reapplyPolicies(v)
	return &proto.Result{}
}

func (s *state) applyPolicyClear(c *proto.PolicyClear) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	m := v.policies
	if c.GetOperator() {
		m = v.operator
	}
	if _, ok := m[c.GetName()]; !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no policy '"+c.GetName()+"' in vhost '"+c.GetVhost()+"'")
	}
	delete(m, c.GetName())
	s.reapplyPolicies(v)
	return &proto.Result{}
}

func best(ps map[string]*policy, name, kind string) *policy {
	var out *policy
	for _, k := range sortedKeys(ps) {
		p := ps[k]
		at := p.def.GetApplyTo()
		if at != "" && at != "all" && at != kind {
			continue
		}
		if !p.re.MatchString(name) {
			continue
		}
		if out == nil || p.def.GetPriority() > out.def.GetPriority() {
			out = p
		}
	}
	return out
}

func matchPolicies(v *vhost, name, kind string) (*policy, *policy) {
	return best(v.policies, name, kind), best(v.operator, name, kind)
}

// reapplyPolicies recomputes every queue's policies: deadlines of queued
// messages from their enqueue stamps, and the length limits at once.
func (s *state) reapplyPolicies(v *vhost) {
	for _, qk := range sortedKeys(v.queues) {
		q, ok := v.queues[qk]
		if !ok {
			continue
		}
		q.policy, q.opPolicy = matchPolicies(v, q.name, "queues")
		q.q.UpdateDeadlines(func(m *queue.Message) int64 { return deadlineOf(q, m) })
		s.enforceLimits(q)
		s.markTimed(q)
		s.markLeased(q)
	}
}
