package cluster

import (
	"strings"
	"sync"
)

// downs is what the metadata leader declared down: a node in the
// metadata log (keyed by its id) and in each queue group (keyed by node
// and group), and the queue-group proposals on their way. The reconcile
// loop proposes and forgets; each queue group's proposal runs on a
// goroutine of its own and reports its commit here, so that a group
// without a quorum, whose proposal waits up to LeaderWait, holds up no
// other group and no other node's NodeDown.
type downs struct {
	mu       sync.Mutex
	declared map[string]bool
	pending  map[string]bool
	// epoch counts, per node, the times it was forgotten (found back):
	// a proposal started before that reports nothing.
	epoch map[string]uint64
}

func newDowns() *downs {
	return &downs{declared: map[string]bool{}, pending: map[string]bool{}, epoch: map[string]uint64{}}
}

// groupKey is the key of node id's NodeDown in queue group gid.
func groupKey(id, gid string) string { return id + "\x00" + gid }

// isDeclared reports whether key was declared down.
func (d *downs) isDeclared(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.declared[key]
}

// declare records that key was declared down.
func (d *downs) declare(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.declared[key] = true
}

// start reports whether a proposal of key is to start (it is neither
// declared nor on its way), and then counts it on its way; epoch is what
// finish takes.
func (d *downs) start(id, key string) (epoch uint64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.declared[key] || d.pending[key] {
		return 0, false
	}
	d.pending[key] = true
	return d.epoch[id], true
}

// finish ends key's proposal, started in epoch, and records it declared
// when it committed and node id was not forgotten meanwhile.
func (d *downs) finish(id, key string, epoch uint64, committed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.epoch[id] != epoch {
		return // forgot clears pending
	}
	delete(d.pending, key)
	if committed {
		d.declared[key] = true
	}
}

// forget forgets that id was declared down, in the metadata log and in
// every queue group, so that a later loss counts anew; the proposals on
// their way for it report nothing.
func (d *downs) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	prefix := id + "\x00"
	changed := false
	for _, m := range []map[string]bool{d.declared, d.pending} {
		for k := range m {
			if k == id || strings.HasPrefix(k, prefix) {
				delete(m, k)
				changed = true
			}
		}
	}
	if changed {
		d.epoch[id]++
	}
}
