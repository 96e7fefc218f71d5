package fsm

import (
	"strings"

	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

func (s *state) applyExchangeDeclare(c *proto.ExchangeDeclare) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	x, ok := v.exchanges[c.GetName()]
	if c.GetPassive() {
		if !ok {
			return notFound("exchange", c.GetName(), c.GetVhost())
		}
		return &proto.Result{}
	}
	if c.GetName() == "" {
		return refused(replycode.AccessRefused, "ACCESS_REFUSED - operation not permitted on the default exchange")
	}
	if !validType(c.GetType()) && !s.delayedType(c.GetType()) && !s.pickDeclared(c.GetType()) {
		return refused(replycode.CommandInvalid, "COMMAND_INVALID - unknown exchange type '"+c.GetType()+"'")
	}
	if ok {
		if x.typ != c.GetType() {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - inequivalent arg 'type' for "+rs("exchange", c.GetName(), c.GetVhost())+": received '"+c.GetType()+"' but current is '"+x.typ+"'")
		}
		for _, f := range []struct {
			name      string
			got, have bool
		}{{"durable", c.GetDurable(), x.durable}, {"auto_delete", c.GetAutoDelete(), x.autoDelete}, {"internal", c.GetInternal(), x.intern}} {
			if f.got != f.have {
				return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - inequivalent arg '"+f.name+"' for "+rs("exchange", c.GetName(), c.GetVhost())+": received '"+boolText(f.got)+"' but current is '"+boolText(f.have)+"'")
			}
		}
		// The one argument RabbitMQ compares on an exchange's redeclare.
		// A redeclare changes nothing either way, so logs from before
		// this refusal apply alike.
		const ae = "alternate-exchange"
		a, aok := tableGet(c.GetArguments(), ae)
		b, bok := tableGet(x.args, ae)
		if aok != bok || (aok && !argEqual(a, b)) {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - inequivalent arg '"+ae+"' for "+rs("exchange", c.GetName(), c.GetVhost())+": received "+describe(a, aok)+" but current is "+describe(b, bok))
		}
		return &proto.Result{}
	}
	if strings.HasPrefix(c.GetName(), "amq.") || c.GetName() == "" {
		return refused(replycode.AccessRefused, "ACCESS_REFUSED - exchange name '"+c.GetName()+"' contains reserved prefix 'amq.*'")
	}
	via, r := delayedVia(c.GetType(), c.GetArguments())
	if r != nil {
		return r
	}
	if r := pickArgs(c.GetType(), c.GetArguments()); r != nil {
		return r
	}
	v.exchanges[c.GetName()] = &exchange{name: c.GetName(), typ: c.GetType(), durable: c.GetDurable(),
		autoDelete: c.GetAutoDelete(), intern: c.GetInternal(), args: c.GetArguments(), via: via}
	return &proto.Result{}
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func (s *state) applyExchangeDelete(c *proto.ExchangeDelete) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	if c.GetName() == "" {
		return refused(replycode.AccessRefused, "ACCESS_REFUSED - operation not permitted on the default exchange")
	}
	if strings.HasPrefix(c.GetName(), "amq.") {
		return refused(replycode.AccessRefused, "ACCESS_REFUSED - deletion of system "+rs("exchange", c.GetName(), c.GetVhost())+" not allowed")
	}
	x, ok := v.exchanges[c.GetName()]
	if !ok {
		return &proto.Result{}
	}
	if c.GetIfUnused() && (len(x.bindings) > 0 || s.isDestination(v, x.name)) {
		return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - "+rs("exchange", c.GetName(), c.GetVhost())+" in use")
	}
	s.deleteExchange(v, x)
	return &proto.Result{}
}

func (s *state) isDestination(v *vhost, name string) bool {
	for _, k := range sortedKeys(v.exchanges) {
		for _, b := range v.exchanges[k].bindings {
			if b.toExchange && b.dest == name {
				return true
			}
		}
	}
	return false
}

func (s *state) deleteExchange(v *vhost, x *exchange) {
	delete(v.exchanges, x.name)
	if x.delayed > 0 {
		s.dropDelayed(func(_ *vhost, dx *exchange) bool { return dx == x })
	}
	s.removeBindingsTo(v, x.name, true)
}

// removeBindingsTo drops every binding whose destination is name, then
// deletes auto-delete exchanges left without bindings.
func (s *state) removeBindingsTo(v *vhost, name string, toExchange bool) {
	var emptied []*exchange
	for _, k := range sortedKeys(v.exchanges) {
		x := v.exchanges[k]
		n := len(x.bindings)
		x.bindings = deleteFunc(x.bindings, func(b *binding) bool { return b.dest == name && b.toExchange == toExchange })
		x.ring = nil
		if n > 0 && len(x.bindings) == 0 && x.autoDelete {
			emptied = append(emptied, x)
		}
	}
	for _, x := range emptied {
		if _, ok := v.exchanges[x.name]; ok {
			s.deleteExchange(v, x)
		}
	}
}

func deleteFunc[T any](s []T, del func(T) bool) []T {
	w := 0
	for _, e := range s {
		if !del(e) {
			s[w] = e
			w++
		}
	}
	clear(s[w:])
	return s[:w]
}

func bindTarget(v *vhost, c interface {
	GetVhost() string
	GetSource() string
	GetDestination() string
	GetDestinationIsExchange() bool
	GetConnection() *proto.ConnectionRef
}) (*exchange, *proto.Result) {
	if c.GetSource() == "" {
		return nil, refused(replycode.AccessRefused, "ACCESS_REFUSED - operation not permitted on the default exchange")
	}
	x, ok := v.exchanges[c.GetSource()]
	if !ok {
		return nil, notFound("exchange", c.GetSource(), c.GetVhost())
	}
	if c.GetDestinationIsExchange() {
		if c.GetDestination() == "" {
			return nil, refused(replycode.AccessRefused, "ACCESS_REFUSED - operation not permitted on the default exchange")
		}
		if _, ok := v.exchanges[c.GetDestination()]; !ok {
			return nil, notFound("exchange", c.GetDestination(), c.GetVhost())
		}
		return x, nil
	}
	q, ok := v.queues[c.GetDestination()]
	if !ok {
		return nil, notFound("queue", c.GetDestination(), c.GetVhost())
	}
	if q.exclusive && q.owner != connRefKey(c.GetConnection()) {
		return nil, locked(q.name, q.vhost)
	}
	return x, nil
}

func connRefKey(c *proto.ConnectionRef) string { return connKey(c.GetNode(), c.GetConnection()) }

func (s *state) applyBind(c *proto.Bind) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	x, r := bindTarget(v, c)
	if r != nil {
		return r
	}
	if r := pickBinding(v, x, c.GetDestination(), c.GetDestinationIsExchange(), c.GetRoutingKey()); r != nil {
		return r
	}
	for _, b := range x.bindings {
		if b.dest == c.GetDestination() && b.toExchange == c.GetDestinationIsExchange() && b.key == c.GetRoutingKey() && pb.Equal(b.args, c.GetArguments()) {
			return &proto.Result{}
		}
	}
	x.bindings = append(x.bindings, &binding{dest: c.GetDestination(), toExchange: c.GetDestinationIsExchange(), key: c.GetRoutingKey(), args: c.GetArguments()})
	x.ring = nil
	return &proto.Result{}
}

func (s *state) applyUnbind(c *proto.Unbind) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	x, r := bindTarget(v, c)
	if r != nil {
		return r
	}
	n := len(x.bindings)
	x.bindings = deleteFunc(x.bindings, func(b *binding) bool {
		return b.dest == c.GetDestination() && b.toExchange == c.GetDestinationIsExchange() && b.key == c.GetRoutingKey() && pb.Equal(b.args, c.GetArguments())
	})
	x.ring = nil
	if n > 0 && len(x.bindings) == 0 && x.autoDelete {
		s.deleteExchange(v, x)
	}
	return &proto.Result{}
}

// routing is one message's way through the exchanges: the queues it
// reaches, each at most once, in a deterministic order, and the delayed
// exchanges that hold it on the way (holds) with the x-delay it asked
// for. Not state.
type routing struct {
	queues []*queueState
	held   []*exchange
	delay  int64
	known  bool // delay was read (when the first delayed exchange was met)
	// probe routes through delayed exchanges as their x-delayed-type, to
	// learn where a message would go now (a mandatory delayed publish).
	probe bool
}

// route routes a message published to x with keys and props.
func (s *state) route(v *vhost, x *exchange, keys []string, props *proto.Properties) routing {
	var r routing
	s.mark++
	s.routeInto(v, x, keys, props, &r)
	return r
}

// probe is the queues a message would reach now if no delayed exchange
// held it.
func (s *state) probe(v *vhost, x *exchange, keys []string, props *proto.Properties) []*queueState {
	r := routing{probe: true}
	s.mark++
	s.routeInto(v, x, keys, props, &r)
	return r.queues
}

func (s *state) routeInto(v *vhost, x *exchange, keys []string, props *proto.Properties, r *routing) {
	if x.mark == s.mark {
		return
	}
	x.mark = s.mark
	n := len(r.queues)
	if x.name == "" {
		for _, k := range keys {
			if q, ok := v.queues[k]; ok && q.mark != s.mark {
				q.mark = s.mark
				r.queues = append(r.queues, q)
			}
		}
		return
	}
	headers := props.GetHeaders()
	if r.holds(x, headers) {
		return
	}
	if pickType(x.typ) {
		if b := s.pick(x, keys, props); b != nil {
			s.routeTo(v, b, keys, props, r)
		}
	} else {
		for _, b := range x.bindings {
			if matches(x.routingType(), b, keys, headers) {
				s.routeTo(v, b, keys, props, r)
			}
		}
	}
	if len(r.queues) == n {
		if av, ok := tableGet(x.args, "alternate-exchange"); ok {
			if name, ok := valueString(av); ok {
				if ae, ok := v.exchanges[name]; ok {
					s.routeInto(v, ae, keys, props, r)
				}
			}
		}
	}
}

// routeTo follows binding b: into the exchange it names, or to its queue.
func (s *state) routeTo(v *vhost, b *binding, keys []string, props *proto.Properties, r *routing) {
	if b.toExchange {
		if d, ok := v.exchanges[b.dest]; ok {
			s.routeInto(v, d, keys, props, r)
		}
		return
	}
	if q, ok := v.queues[b.dest]; ok && q.mark != s.mark {
		q.mark = s.mark
		r.queues = append(r.queues, q)
	}
}

func matches(typ string, b *binding, keys []string, headers *proto.Table) bool {
	switch typ {
	case "fanout":
		return true
	case "direct":
		for _, k := range keys {
			if k == b.key {
				return true
			}
		}
	case "topic":
		for _, k := range keys {
			if topicMatch(strings.Split(b.key, "."), strings.Split(k, ".")) {
				return true
			}
		}
	case "headers":
		return headersMatch(b.args, headers)
	}
	return false
}

// topicMatch matches the words of a routing key against a binding
// pattern: "*" is one word, "#" zero or more. It walks the pattern once,
// tracking which prefixes of the key the pattern so far matches, so a
// pattern of many "#" costs len(p)*len(w) steps instead of growing
// exponentially (a binding key any client may declare).
func topicMatch(p, w []string) bool {
	reach := make([]bool, 2*(len(w)+1))
	cur, next := reach[:len(w)+1], reach[len(w)+1:]
	cur[0] = true
	for _, pw := range p {
		clear(next)
		switch pw {
		case "#":
			on := false
			for j := range cur {
				on = on || cur[j]
				next[j] = on
			}
		case "*":
			for j := 1; j < len(cur); j++ {
				next[j] = cur[j-1]
			}
		default:
			for j := 1; j < len(cur); j++ {
				next[j] = cur[j-1] && w[j-1] == pw
			}
		}
		cur, next = next, cur
	}
	return cur[len(w)]
}

func headersMatch(args, headers *proto.Table) bool {
	mode := "all"
	if v, ok := tableGet(args, "x-match"); ok {
		if m, ok := valueString(v); ok {
			mode = m
		}
	}
	any := strings.HasPrefix(mode, "any")
	withX := strings.HasSuffix(mode, "-with-x")
	seen := 0
	for _, f := range args.GetFields() {
		if f.GetKey() == "x-match" || (!withX && strings.HasPrefix(f.GetKey(), "x-")) {
			continue
		}
		seen++
		h, ok := tableGet(headers, f.GetKey())
		hit := ok && (f.GetValue().GetKind() == nil || isVoid(f.GetValue()) || pb.Equal(h, f.GetValue()))
		if any && hit {
			return true
		}
		if !any && !hit {
			return false
		}
	}
	return !any
}

func isVoid(v *proto.Value) bool {
	_, ok := v.GetKind().(*proto.Value_Void)
	return ok
}
