package membership

import (
	"cmp"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

// metaVersion is the NodeMeta format this node gossips.
const metaVersion = 1

// Config is what the node gives its gossip: its id and addresses, whom it
// joins, the gossip keys, and where its own changes go.
type Config struct {
	NodeID string
	// DataDir holds the remembered peers (peers.go).
	DataDir string
	// GossipAddr is the memberlist listen address (TCP and UDP);
	// GossipAdvertise the address peers use (default: derived by
	// memberlist).
	GossipAddr      string
	GossipAdvertise string
	// GRPCAddr and AMQPAddr are addresses this node advertises in its
	// metadata (with the raft address Start is given).
	GRPCAddr, AMQPAddr string
	// Join lists gossip addresses of nodes to join; JoinRetryInterval is
	// the pause between attempts.
	Join              []string
	JoinRetryInterval time.Duration
	// JoinWarnAfter is how long joins may fail before Run warns that no
	// seed answers (default 10 s); it warns again at twice the wait
	// each time, up to every 5 minutes.
	JoinWarnAfter time.Duration
	// Keys encrypt and authenticate gossip (memberlist's keyring; nil:
	// plain gossip).
	Keys [][]byte
	// BootMs is when this run started (unix ms), gossiped; Protocol the
	// command protocol this node announces.
	BootMs   int64
	Protocol uint32
	// Tune adjusts the memberlist configuration (tests tighten timings).
	Tune func(*memberlist.Config)
	// Transport wraps memberlist's network transport (nil: as it is).
	Transport func(memberlist.Transport) memberlist.Transport
	Logger    *slog.Logger
	// MemberlistLogger is what memberlist itself logs through.
	MemberlistLogger *log.Logger
	// Changed is called when a member joins, leaves or changes.
	Changed func()
}

// Gossip is this node's membership of the cluster's gossip: memberlist,
// the member table its events feed, the metadata this node gossips, and
// the peers it remembers.
type Gossip struct {
	cfg      Config
	raftAddr string // advertised raft address, set by Start
	list     *memberlist.Memberlist
	addr     string // advertised gossip address
	members  *Table

	peersMu sync.Mutex
	peers   []string // remembered gossip addresses of the other members (peers.go)

	hasState atomic.Bool
	leaving  atomic.Bool
	joined   atomic.Bool // a seed answered a join (Run)
	protocol atomic.Uint32
	// unreachable is what the leader gossips raft does not reach.
	unreachable atomic.Pointer[[]string]
	// leads are the queue groups this node leads (SetLeads).
	leads atomic.Pointer[[]*proto.GroupLead]

	stopOnce sync.Once
	stopped  chan struct{} // closed by Shutdown
}

// New returns the gossip of a node, not started yet (Start), with an
// empty member table.
func New(cfg Config) *Gossip {
	g := &Gossip{cfg: cfg, members: NewTable(), stopped: make(chan struct{})}
	g.protocol.Store(cfg.Protocol)
	return g
}

// Members is the member table.
func (g *Gossip) Members() *Table { return g.members }

// Addr is the advertised gossip address (set by Start).
func (g *Gossip) Addr() string { return g.addr }

// BootMs is when this run started (unix ms).
func (g *Gossip) BootMs() int64 { return g.cfg.BootMs }

// Protocol is the command protocol this node announces.
func (g *Gossip) Protocol() uint32 { return g.protocol.Load() }

// SetProtocol changes the protocol this node announces (tests); it is
// gossiped with the next change.
func (g *Gossip) SetProtocol(p uint32) { g.protocol.Store(p) }

// HasState reports whether this node belongs to a cluster (it has a raft
// configuration).
func (g *Gossip) HasState() bool { return g.hasState.Load() }

// SetHasState records that this node belongs to a cluster and gossips it.
func (g *Gossip) SetHasState() {
	if g.hasState.Swap(true) {
		return
	}
	if err := g.Update(time.Second); err != nil {
		g.cfg.Logger.Debug("gossip update", "err", err)
	}
}

// SetUnreachable sets the servers raft does not reach that this node
// gossips, and gossips them, waiting at most a second for the broadcast.
func (g *Gossip) SetUnreachable(ids []string) error {
	g.unreachable.Store(&ids)
	return g.Update(time.Second)
}

// SetLeads sets the queue groups this node gossips it leads, and gossips
// them, waiting at most timeout for the broadcast.
func (g *Gossip) SetLeads(leads []*proto.GroupLead, timeout time.Duration) error {
	g.leads.Store(&leads)
	return g.Update(timeout)
}

// LocalMeta is the metadata this node gossips.
func (g *Gossip) LocalMeta() *proto.NodeMeta {
	return &proto.NodeMeta{
		Version:  metaVersion,
		Id:       g.cfg.NodeID,
		RaftAddr: g.raftAddr,
		GrpcAddr: g.cfg.GRPCAddr,
		AmqpAddr: g.cfg.AMQPAddr,
		HasState: g.hasState.Load(),
		Leaving:  g.leaving.Load(),
		BootMs:   g.cfg.BootMs,
		Protocol: g.protocol.Load(),
		Unreachable: func() []string {
			if p := g.unreachable.Load(); p != nil {
				return *p
			}
			return nil
		}(),
		Leads: func() []*proto.GroupLead {
			if p := g.leads.Load(); p != nil {
				return *p
			}
			return nil
		}(),
	}
}

// delegate gives memberlist this node's metadata and feeds its events
// into the member table.
type delegate struct{ g *Gossip }

func (d delegate) NodeMeta(limit int) []byte {
	meta := d.g.LocalMeta()
	b, _ := gproto.Marshal(meta)
	if len(b) > limit && len(meta.Unreachable) > 0 {
		// What raft reaches is a hint the others can do without.
		meta.Unreachable = nil
		b, _ = gproto.Marshal(meta)
	}
	if len(b) > limit && len(meta.Leads) > 0 {
		// So is what this node leads: the surfaces then show no leader
		// for the groups other nodes do not run.
		meta.Leads = nil
		b, _ = gproto.Marshal(meta)
	}
	if len(b) > limit {
		d.g.cfg.Logger.Error("node metadata exceeds the gossip limit", "size", len(b), "limit", limit)
		return nil
	}
	return b
}
func (delegate) NotifyMsg([]byte)                {}
func (delegate) GetBroadcasts(int, int) [][]byte { return nil }
func (delegate) LocalState(bool) []byte          { return nil }
func (delegate) MergeRemoteState([]byte, bool)   {}

func (d delegate) NotifyJoin(m *memberlist.Node) {
	d.g.members.Set(m, HealthAlive)
	d.g.cfg.Changed()
}

func (d delegate) NotifyLeave(m *memberlist.Node) {
	d.g.members.Set(m, HealthDead)
	d.g.cfg.Changed()
}

func (d delegate) NotifyUpdate(m *memberlist.Node) {
	d.g.members.Set(m, HealthAlive)
	d.g.cfg.Changed()
}

// Start listens and starts memberlist, gossiping raftAddr as this node's
// raft address; it joins no one yet (Run).
func (g *Gossip) Start(raftAddr string) error {
	g.raftAddr = raftAddr
	cfg := &g.cfg
	host, portS, err := net.SplitHostPort(cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("cluster: gossip address %q: %w", cfg.GossipAddr, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return fmt.Errorf("cluster: gossip port %q: %w", portS, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	glog := cfg.MemberlistLogger
	nt, err := newTransport(host, port, glog)
	if err != nil {
		return fmt.Errorf("cluster: gossip listen: %w", err)
	}
	mc := memberlist.DefaultLANConfig()
	// memberlist compresses every packet it sends with a fresh LZW writer,
	// whose 64 KiB table is allocated and zeroed each time, and sends the
	// result only when it is smaller: a probe's ping and ack, a few dozen
	// bytes, never are, and on an idle node those tables were about a
	// twelfth of its CPU. Compressed packets of other nodes are still read.
	mc.EnableCompression = false
	mc.Name = cfg.NodeID
	mc.BindAddr = host
	mc.BindPort = nt.Port()
	if cfg.GossipAdvertise != "" {
		ah, ap, err := net.SplitHostPort(cfg.GossipAdvertise)
		if err != nil {
			_ = nt.Shutdown()
			return fmt.Errorf("cluster: gossip advertise %q: %w", cfg.GossipAdvertise, err)
		}
		mc.AdvertiseAddr = ah
		mc.AdvertisePort, _ = strconv.Atoi(ap)
	}
	mc.Transport = nt
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport(nt)
	}
	mc.Logger = glog
	d := delegate{g: g}
	mc.Delegate = d
	mc.Events = d
	if len(cfg.Keys) > 0 {
		kr, err := memberlist.NewKeyring(cfg.Keys, cfg.Keys[0])
		if err != nil {
			_ = nt.Shutdown()
			return fmt.Errorf("cluster: gossip keyring: %w", err)
		}
		mc.Keyring = kr
		// Refuse plain packets and streams, and send none: a node without
		// the key neither joins nor hears the members.
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	if cfg.Tune != nil {
		cfg.Tune(mc)
	}
	list, err := memberlist.Create(mc)
	if err != nil {
		_ = nt.Shutdown()
		return fmt.Errorf("cluster: start gossip: %w", err)
	}
	g.list = list
	// Read once now: memberlist updates its local node without a lock later.
	g.addr = list.LocalNode().Address()
	return nil
}

// Joined reports whether a seed has answered one of Run's joins: the
// members it knows then include the cluster it joined, if there is one.
func (g *Gossip) Joined() bool { return g.joined.Load() }

// Joins reads the remembered peers and reports whether there is anyone
// to join (Run then joins them).
func (g *Gossip) Joins() bool {
	g.loadPeers()
	return len(g.joinSeeds()) > 0
}

// Run joins the seeds, retrying until one answers, and joins them again
// whenever this node finds itself alone (after a long partition
// memberlist forgets the members it declared dead), until closing. Beside
// it, reconnect reaches out to the members declared dead.
func (g *Gossip) Run(closing <-chan struct{}) {
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		g.reconnect(closing)
	}()
	// Until a seed first answers, failures are told as warnings now and
	// then: a new node told to join waits for its seeds and starts no
	// cluster of its own, so a wrong --join would otherwise leave it
	// waiting without a word.
	warnAfter := cmp.Or(g.cfg.JoinWarnAfter, 10*time.Second)
	var failingSince time.Time
	for {
		if seeds := g.joinSeeds(); g.list.NumMembers() <= 1 && len(seeds) > 0 {
			k, err := g.list.Join(seeds)
			switch {
			case k > 0 && !g.joined.Swap(true):
				g.cfg.Logger.Info("joined the cluster", "seeds_answered", k)
			case k > 0:
				g.cfg.Logger.Info("re-joined the cluster", "seeds_answered", k)
			case g.joined.Load():
				g.cfg.Logger.Debug("join failed, retrying", "err", err)
			default:
				if failingSince.IsZero() {
					failingSince = time.Now()
				}
				if waited := time.Since(failingSince); waited >= warnAfter {
					msg := "no node to join answers yet: still trying"
					if !g.HasState() {
						msg = "no node to join answers yet: a new node waits for one and starts no cluster of its own"
					}
					g.cfg.Logger.Warn(msg, "seeds", seeds, "waiting_for", waited.Round(time.Second), "err", err)
					warnAfter = min(2*warnAfter, waited+5*time.Minute)
				}
			}
		}
		t := time.NewTimer(g.cfg.JoinRetryInterval)
		select {
		case <-t.C:
		case <-closing:
			t.Stop()
			return
		}
	}
}

// reconnect joins, one a round, the members this node holds dead, until
// closing. memberlist neither probes nor (after GossipToTheDeadTime)
// gossips to a member it declared dead, and a member that was cut off
// but declared no one dead itself is not alone, so Run does not join
// again for it: it hears that it was declared dead, and refutes it, only
// at its next push-pull, up to PushPullInterval (30 s) after the cut
// heals, and longer when its own view still holds the others suspect
// (push-pull picks among the alive). A join is a push-pull with the dead
// member: it learns it was declared dead and refutes it at once, and the
// next round's join carries the refutation back even when the gossip
// packets are still lost. A member that is really gone costs a refused
// dial a round.
func (g *Gossip) reconnect(closing <-chan struct{}) {
	var last string
	t := time.NewTicker(g.cfg.JoinRetryInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-closing:
			return
		}
		if g.leaving.Load() {
			// A join would undo the leave.
			return
		}
		id, addr := g.nextDead(last)
		if addr == "" {
			continue
		}
		last = id
		if _, err := g.list.Join([]string{addr}); err != nil {
			g.cfg.Logger.Debug("reconnect to a member declared dead failed", "member", id, "err", err)
		}
	}
}

// nextDead is the member declared dead (not one that left) after the one
// named last, by id, wrapping around: each gets its turn.
func (g *Gossip) nextDead(last string) (id, addr string) {
	var dead []string
	all := g.members.All()
	for mid, m := range all {
		if mid != g.cfg.NodeID && m.Health == HealthDead && m.Addr != "" {
			dead = append(dead, mid)
		}
	}
	if len(dead) == 0 {
		return "", ""
	}
	slices.Sort(dead)
	i, _ := slices.BinarySearch(dead, last)
	if i < len(dead) && dead[i] == last {
		i++
	}
	id = dead[i%len(dead)]
	return id, all[id].Addr
}

// SetLeaving records that this node is leaving; Update gossips it.
func (g *Gossip) SetLeaving() { g.leaving.Store(true) }

// ErrStopped is what a wait for a broadcast returns once the gossip is
// shut down.
var ErrStopped = errors.New("membership: gossip shut down")

// Update gossips this node's metadata again, waiting at most timeout for
// the broadcast, and no longer than until Shutdown: memberlist waits
// out the whole timeout for a broadcast that a gossip shut down never
// sends, and the stop of the node that gossips waited with it (a
// leadership handed over at the stop changes what it gossips).
func (g *Gossip) Update(timeout time.Duration) error {
	if g.list == nil {
		return nil
	}
	select {
	case <-g.stopped:
		return ErrStopped
	default:
	}
	done := make(chan error, 1)
	// Ends within timeout: memberlist's wait takes no cancel.
	go func() { done <- g.list.UpdateNode(timeout) }()
	select {
	case err := <-done:
		return err
	case <-g.stopped:
		return ErrStopped
	}
}

// Leave leaves the gossip, waiting at most timeout.
func (g *Gossip) Leave(timeout time.Duration) error {
	if g.list == nil {
		return nil
	}
	return g.list.Leave(timeout)
}

// Shutdown stops memberlist (it ends a join in progress); it may be
// called more than once, and before Start.
func (g *Gossip) Shutdown() {
	g.stopOnce.Do(func() { close(g.stopped) })
	if g.list != nil {
		_ = g.list.Shutdown()
	}
}
