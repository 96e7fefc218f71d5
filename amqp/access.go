package amqp

import (
	"regexp"
	"sync"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
)

// access is one of RabbitMQ's three permission kinds.
type access int

const (
	accessConfigure access = iota
	accessWrite
	accessRead
)

// permissions caches a user's compiled permission regexps in one vhost. The
// strings are read from the applied state on every check, so a change made
// through the log applies to open connections at once; they are compiled
// again only when they change.
type permissions struct {
	mu  sync.Mutex
	src [3]string
	re  [3]*regexp.Regexp
}

// match reports whether name matches the pattern of kind a, given the
// current pattern strings (RabbitMQ anchors nothing: the regexp is matched
// as written, and an empty pattern matches nothing).
func (p *permissions) match(current [3]string, a access, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.re[a] == nil || p.src[a] != current[a] {
		p.src[a] = current[a]
		if current[a] == "" {
			p.re[a] = nil
			return false
		}
		re, err := regexp.Compile(current[a])
		if err != nil {
			p.re[a] = nil
			return false
		}
		p.re[a] = re
	}
	return p.re[a].MatchString(name)
}

// allowedSize is how many resources a channel remembers it was allowed,
// RabbitMQ's size of a channel's authorization cache.
const allowedSize = 12

// allowed remembers the last resources a channel was allowed, so that a
// publisher writing to the same exchanges matches no regexp per message.
// An entry holds the pattern it matched: the patterns are read from the
// applied state on every check, so a changed permission misses every entry
// made under the old one and a revocation refuses the very next method.
// Refusals are not remembered: they close the channel.
type allowed struct {
	e    [allowedSize]allowedEntry
	next int
}

type allowedEntry struct {
	a       access
	pattern string // never empty in a used entry: "" matches nothing
	name    string
}

func (l *allowed) has(a access, pattern, name string) bool {
	if pattern == "" {
		return false
	}
	for i := range l.e {
		if e := &l.e[i]; e.a == a && e.name == name && e.pattern == pattern {
			return true
		}
	}
	return false
}

func (l *allowed) add(a access, pattern, name string) {
	l.e[l.next] = allowedEntry{a: a, pattern: pattern, name: name}
	l.next = (l.next + 1) % allowedSize
}

// authorize checks that the connection's user may perform access a on the
// resource kind ("queue" or "exchange") named name in the connection's
// vhost, and returns RabbitMQ's channel error 403 ACCESS_REFUSED otherwise.
// The default exchange is checked under the name amq.default, as in
// RabbitMQ.
func (ch *channel) authorize(m wire.Method, a access, kind, name string) *wire.Error {
	c := ch.c
	conf, write, read, ok := c.srv.node().Permission(c.user, c.vhost)
	if kind == "exchange" && name == "" {
		name = "amq.default"
	}
	if ok {
		current := [3]string{conf, write, read}
		if ch.allowed.has(a, current[a], name) {
			return nil
		}
		if c.perms.match(current, a, name) {
			ch.allowed.add(a, current[a], name)
			return nil
		}
	}
	return wire.ChanError(replycode.AccessRefused, m.ClassID(), m.MethodID(),
		"access to %s '%s' in vhost '%s' refused for user '%s'", kind, name, c.vhost, c.user)
}

// authorizeBind checks a bind or unbind: write on the destination (a queue
// or an exchange) and read on the source exchange.
func (ch *channel) authorizeBind(m wire.Method, destKind, dest, source string) *wire.Error {
	if e := ch.authorize(m, accessWrite, destKind, dest); e != nil {
		return e
	}
	return ch.authorize(m, accessRead, "exchange", source)
}

// authorizeTarget makes RabbitMQ's check of a declare whose arguments name
// another exchange (x-dead-letter-exchange on a queue, alternate-exchange
// on an exchange): read on the declared resource and write on the named
// exchange. Without it a user confined to some names could route messages
// into any exchange through a dead-letter or alternate exchange. A value
// that is not a string names no exchange, and is refused with RabbitMQ's
// channel error for it ("invalid type 'signedint' for arg ...").
func (ch *channel) authorizeTarget(m wire.Method, kind, name string, args wire.Table, key string) *wire.Error {
	v, ok := args.Get(key)
	if !ok {
		return nil
	}
	target, ok := v.(string)
	if !ok {
		// RabbitMQ's channel checks the type before the permission.
		typ := "void"
		if pv, err := valueToProto(v); err == nil {
			typ = fsm.TypeName(pv)
		}
		return wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(),
			"invalid type '%s' for arg '%s' in %s '%s' in vhost '%s'", typ, key, kind, name, ch.vhost())
	}
	if e := ch.authorize(m, accessRead, kind, name); e != nil {
		return e
	}
	return ch.authorize(m, accessWrite, "exchange", target)
}

// checkUserID refuses a publish whose user-id property names someone other
// than the connection's user, with RabbitMQ's channel error, so a consumer
// can trust the property.
func (ch *channel) checkUserID(m wire.Method, p *wire.Properties) *wire.Error {
	if p == nil || p.Flags&wire.FlagUserID == 0 || p.UserID == ch.c.user {
		return nil
	}
	return wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(),
		"user_id property set to '%s' but authenticated user was '%s'", p.UserID, ch.c.user)
}
