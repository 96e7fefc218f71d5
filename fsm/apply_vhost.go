package fsm

import (
	"slices"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

var defaultExchanges = []struct{ name, typ string }{
	{"", "direct"}, {"amq.direct", "direct"}, {"amq.fanout", "fanout"},
	{"amq.headers", "headers"}, {"amq.match", "headers"}, {"amq.topic", "topic"},
}

func (s *state) applyVhostPut(c *proto.VhostPut) *proto.Result {
	s.initialized = true
	if v, ok := s.vhosts[c.GetName()]; ok {
		v.desc = c.GetDescription()
		return &proto.Result{}
	}
	v := newVhost(c.GetName(), c.GetDescription())
	for _, d := range defaultExchanges {
		v.exchanges[d.name] = &exchange{name: d.name, typ: d.typ, durable: true}
	}
	s.vhosts[v.name] = v
	return &proto.Result{}
}

func newVhost(name, desc string) *vhost {
	return &vhost{name: name, desc: desc, exchanges: map[string]*exchange{}, queues: map[string]*queueState{},
		policies: map[string]*policy{}, operator: map[string]*policy{}}
}

func (s *state) applyVhostDelete(c *proto.VhostDelete) *proto.Result {
	v, ok := s.vhosts[c.GetName()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetName()+"'")
	}
	for _, qk := range sortedKeys(v.queues) {
		s.deleteQueue(v.queues[qk], true)
	}
	delete(s.vhosts, c.GetName())
	s.dropDelayedOf(v)
	for _, k := range sortedKeys(s.perms) {
		if s.perms[k].GetVhost() == c.GetName() {
			delete(s.perms, k)
		}
	}
	// A queue group applies the delete too, for its queues; the
	// metadata log alone speaks for the vhost.
	if a, ok := s.sink.(AccessSink); ok && s.groups.id == 0 {
		a.VhostDeleted(c.GetName())
	}
	return &proto.Result{}
}

func (s *state) applyUserPut(c *proto.UserPut) *proto.Result {
	s.initialized = true
	s.users[c.GetName()] = &user{name: c.GetName(), hash: slices.Clone(c.GetPasswordHash()), alg: c.GetHashAlgorithm(), tags: slices.Clone(c.GetTags())}
	return &proto.Result{}
}

func (s *state) applyUserDelete(c *proto.UserDelete) *proto.Result {
	if _, ok := s.users[c.GetName()]; !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no user '"+c.GetName()+"'")
	}
	delete(s.users, c.GetName())
	for _, k := range sortedKeys(s.perms) {
		if s.perms[k].GetUser() == c.GetName() {
			delete(s.perms, k)
		}
	}
	if a, ok := s.sink.(AccessSink); ok && s.groups.id == 0 {
		a.UserDeleted(c.GetName())
	}
	return &proto.Result{}
}

func (s *state) applyPermissionSet(c *proto.PermissionSet) *proto.Result {
	if _, ok := s.users[c.GetUser()]; !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no user '"+c.GetUser()+"'")
	}
	if _, ok := s.vhosts[c.GetVhost()]; !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	s.perms[c.GetUser()+"\x00"+c.GetVhost()] = &proto.PermissionInfo{User: c.GetUser(), Vhost: c.GetVhost(),
		Configure: c.GetConfigure(), Write: c.GetWrite(), Read: c.GetRead()}
	return &proto.Result{}
}

func (s *state) applyPermissionClear(c *proto.PermissionClear) *proto.Result {
	delete(s.perms, c.GetUser()+"\x00"+c.GetVhost())
	return &proto.Result{}
}
