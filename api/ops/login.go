package ops

import (
	"slices"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/version"
	"github.com/raftmq/raftmq/proto"
)

// Login is a user whose password checked out: its tags and its
// permissions by vhost, copied out of the state.
type Login struct {
	Name  string
	Tags  []string
	Perms map[string]*proto.PermissionInfo
}

// Authenticate checks a password against the user's stored hash with the
// state machine's check (the one AMQP logins use); every front end logs
// users in with it.
func Authenticate(node Node, user, password string) (*Login, bool) {
	l := &Login{Name: user, Perms: map[string]*proto.PermissionInfo{}}
	var (
		hash  []byte
		found bool
	)
	node.LocalView(func(s State) {
		hash, _, found = s.UserPasswordHash(user)
		if !found {
			return
		}
		hash = slices.Clone(hash)
		for _, u := range s.Users() {
			if u.GetName() == user {
				l.Tags = slices.Clone(u.GetTags())
			}
		}
		for _, p := range s.Permissions() {
			if p.GetUser() == user {
				l.Perms[p.GetVhost()] = &proto.PermissionInfo{User: p.GetUser(), Vhost: p.GetVhost(),
					Configure: p.GetConfigure(), Write: p.GetWrite(), Read: p.GetRead()}
			}
		}
	})
	if !found || !fsm.CheckPassword(hash, fsm.PasswordSaltLen, password) {
		return nil, false
	}
	return l, true
}

// NotReady returns why the node is not ready to serve clients, "" when it
// is: it is a member of the raft configuration, knows a leader, has
// applied the leader's defaults and takes clients (ClientRefuser: a node
// cut off from a majority closes their connections).
func NotReady(n Node) string {
	self := n.NodeID()
	member := false
	for _, m := range n.Members() {
		if m.GetId() == self && m.GetSuffrage() != "" {
			member = true
			break
		}
	}
	if !member {
		return "not a member of the raft configuration"
	}
	if id, _ := n.Leader(); id == "" {
		return "no leader is known"
	}
	initialized := false
	n.LocalView(func(s State) { initialized = s.Initialized() })
	if !initialized {
		return "the leader's defaults are not applied yet"
	}
	if r, ok := n.(ClientRefuser); ok {
		return r.Refusing()
	}
	return ""
}

// ProductVersion is the version raftmq reports (raftmq --version, the
// management API's product_version, the metrics' build info, AMQP's
// connection.start): internal/version's, so no surface can disagree.
func ProductVersion() string { return version.String() }

// CompatVersion is the RabbitMQ version whose management API and metrics
// raftmq mimics; tools pick their code paths by it.
const CompatVersion = "3.10.8"

// ClusterPermanentID is RabbitMQ's cluster_permanent_id (the metrics'
// rabbitmq_cluster_permanent_id, the management API's internal_cluster_id): RabbitMQ generates
// one per cluster; raftmq's cluster is named by its cluster name, so the id
// is derived from it and stays the same across restarts and nodes.
func ClusterPermanentID(cluster string) string {
	return "rabbitmq-cluster-id-" + cluster
}
