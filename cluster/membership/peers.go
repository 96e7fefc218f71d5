package membership

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// peersFile, in the data dir, remembers the gossip addresses of the other
// members. A node that starts again joins them as well as its --join
// seeds: the README's and the deployments' seeds name one node, and when
// that node restarts alone its only seed is itself. memberlist would then
// find the others only once one of them gossips to the dead node (up to
// 30 s), and until then the node cannot forward, so it is not ready.
const peersFile = "gossip-peers"

// loadPeers reads the remembered addresses; a missing or unreadable file
// remembers nothing (the seeds still apply).
func (g *Gossip) loadPeers() {
	b, err := os.ReadFile(filepath.Join(g.cfg.DataDir, peersFile))
	if err != nil {
		if !os.IsNotExist(err) {
			g.cfg.Logger.Warn("remembered gossip peers unreadable; joining the seeds only", "err", err)
		}
		return
	}
	var peers []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			peers = append(peers, l)
		}
	}
	g.peersMu.Lock()
	g.peers = peers
	g.peersMu.Unlock()
}

// SavePeers remembers the gossip addresses of the members alive now, when
// there are any and they differ from what is remembered: a node alone
// keeps what it knew.
func (g *Gossip) SavePeers() {
	var peers []string
	for id, m := range g.members.All() {
		if id != g.cfg.NodeID && m.Health == HealthAlive && m.Addr != "" {
			peers = append(peers, m.Addr)
		}
	}
	if len(peers) == 0 {
		return
	}
	slices.Sort(peers)
	g.peersMu.Lock()
	defer g.peersMu.Unlock()
	if slices.Equal(peers, g.peers) {
		return
	}
	path := filepath.Join(g.cfg.DataDir, peersFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(peers, "\n")+"\n"), 0o600); err != nil {
		g.cfg.Logger.Warn("cannot remember the gossip peers", "err", err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		g.cfg.Logger.Warn("cannot remember the gossip peers", "err", err)
		return
	}
	g.peers = peers
}

// joinSeeds is what the node joins: its seeds and the remembered peers,
// without its own address (joining itself answers, and would count as
// having found the cluster).
func (g *Gossip) joinSeeds() []string {
	g.peersMu.Lock()
	defer g.peersMu.Unlock()
	var out []string
	for _, s := range append(slices.Clone(g.cfg.Join), g.peers...) {
		if s != g.addr && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
