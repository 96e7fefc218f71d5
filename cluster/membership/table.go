// Package membership is who is in the cluster as this node sees it: the
// gossip (memberlist) that carries each node's metadata, the member table
// its events feed (Table), the remembered peers a restarted node joins,
// and whom this node's raft and pings reach (Reach). It knows the node
// only through what the node gives it (Config).
package membership

import (
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

// Member health as this node sees it through memberlist.
const (
	// HealthAlive is a member that answers.
	HealthAlive = "alive"
	// HealthDead is a member memberlist declared dead (it may come back).
	HealthDead = "dead"
	// HealthLeft is a member that announced it is leaving, or left.
	HealthLeft = "left"
)

// Member is one gossip member as this node last heard of it.
type Member struct {
	Meta   *proto.NodeMeta
	Addr   string // gossip address
	Health string
	Since  time.Time // when Health last changed
	// Rebooted is when this node saw the member announce a new boot (its
	// process restarted), zero if it never did: the first boot it heard
	// of is none.
	Rebooted time.Time
}

// Table is this node's view of the gossip members, fed by memberlist
// events (memberlist itself forgets dead members).
type Table struct {
	mu sync.Mutex
	m  map[string]*Member
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{m: map[string]*Member{}} }

// Get returns the member id.
func (t *Table) Get(id string) (Member, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.m[id]
	if !ok {
		return Member{}, false
	}
	return *m, true
}

// All returns every member, by id.
func (t *Table) All() map[string]Member {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]Member, len(t.m))
	for id, m := range t.m {
		out[id] = *m
	}
	return out
}

// Set records what memberlist says of n: its metadata and health.
func (t *Table) Set(n *memberlist.Node, health string) {
	meta := &proto.NodeMeta{}
	if err := gproto.Unmarshal(n.Meta, meta); err != nil || meta.GetId() == "" {
		meta = &proto.NodeMeta{Id: n.Name}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.m[n.Name]
	// memberlist does not say whether a member left or died: a member that
	// announced it is leaving has left.
	if meta.GetLeaving() || (health == HealthDead && ok && old.Meta.GetLeaving()) {
		health = HealthLeft
	}
	now := time.Now()
	var rebooted time.Time
	if ok {
		rebooted = old.Rebooted
		if b := old.Meta.GetBootMs(); b != 0 && meta.GetBootMs() != 0 && b != meta.GetBootMs() {
			rebooted = now
		}
	}
	if ok && old.Health == health {
		old.Meta, old.Addr, old.Rebooted = meta, n.Address(), rebooted
		return
	}
	t.m[n.Name] = &Member{Meta: meta, Addr: n.Address(), Health: health, Since: now, Rebooted: rebooted}
}
