package membership

import (
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/raftmq/raftmq/cluster/links"
	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

// gossiped is the memberlist node that announces meta.
func gossiped(t *testing.T, meta *proto.NodeMeta) *memberlist.Node {
	t.Helper()
	b, err := gproto.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	return &memberlist.Node{Name: meta.GetId(), Meta: b}
}

// A member that announced it is leaving shows left, and stays left when
// memberlist then declares it dead; one that died without a word is dead.
func TestTable_LeavingMemberThatDiesHasLeft(t *testing.T) {
	tab := NewTable()
	node := func(id string, leaving bool) *memberlist.Node {
		return gossiped(t, &proto.NodeMeta{Id: id, Leaving: leaving})
	}
	tab.Set(node("a", false), HealthAlive)
	tab.Set(node("b", false), HealthAlive)
	tab.Set(node("a", true), HealthAlive)
	tab.Set(node("a", true), HealthDead)
	tab.Set(node("b", false), HealthDead)
	for id, want := range map[string]string{"a": HealthLeft, "b": HealthDead} {
		if m, ok := tab.Get(id); !ok || m.Health != want {
			t.Errorf("%s: %q (known %v), want %q", id, m.Health, ok, want)
		}
	}
}

// A member's restart is a boot that changed: the first boot heard of is
// none, nor is the same boot again, a dead member's or one without a boot;
// the restart is dated when it was heard of, and kept.
func TestTable_ARestartIsABootThatChanged(t *testing.T) {
	tab := NewTable()
	node := func(id string, boot int64) *memberlist.Node {
		return gossiped(t, &proto.NodeMeta{Id: id, BootMs: boot})
	}
	rebooted := func(id string) time.Time {
		m, _ := tab.Get(id)
		return m.Rebooted
	}
	tab.Set(node("a", 100), HealthAlive)
	tab.Set(node("b", 0), HealthAlive)
	tab.Set(node("a", 100), HealthDead)
	tab.Set(node("b", 0), HealthAlive)
	if !rebooted("a").IsZero() || !rebooted("b").IsZero() {
		t.Fatalf("restarts without a new boot: a %v, b %v", rebooted("a"), rebooted("b"))
	}
	before := time.Now()
	tab.Set(node("a", 200), HealthAlive)
	at := rebooted("a")
	if at.Before(before) {
		t.Fatalf("a's new boot: restart at %v, want from %v", at, before)
	}
	tab.Set(node("a", 200), HealthAlive)
	tab.Set(node("a", 200), HealthDead)
	if !rebooted("a").Equal(at) {
		t.Fatalf("a's restart moved to %v without a new boot", rebooted("a"))
	}
}

// A new leader gives every server the wait from when it first counts it,
// whatever it answered before the term, except the leader it followed
// before: that one is counted from when this node last heard from it,
// though not from before the floor.
func TestReach_NewTermCountsThePreviousLeaderFromItsSilence(t *testing.T) {
	r := NewReach()
	now := time.Now()
	r.LeaderChanged("self", "old", now.Add(-2*time.Hour), time.Time{}, time.Second)
	r.LeaderChanged("self", "", now.Add(-time.Second), now.Add(-time.Hour), time.Second)
	r.LeaderChanged("self", "self", now, time.Time{}, time.Second)
	r.Reset(now, now.Add(-time.Minute))
	r.Ack("fresh", now)
	r.Ack("stale", now.Add(-2*time.Second))
	got := r.Unreachable([]string{"self", "fresh", "stale", "new", "old"}, "self", time.Second)
	if s := r.SilentFor("old", now); s < time.Minute {
		t.Errorf("the previous leader silent for %v, want the floor's minute", s)
	}
	if want := []string{"old"}; !slices.Equal(got, want) {
		t.Fatalf("unreachable %v, want %v", got, want)
	}
	if !r.WasLeader() {
		t.Error("the last leader this node knew of was itself, WasLeader false")
	}
}

// frozenLeaderLost is node y's Reach after it followed "frozen" for a
// minute from at(0) and lost it then, last heard a second before.
func frozenLeaderLost(settled time.Duration) (*Reach, func(time.Duration) time.Time) {
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	r := NewReach()
	r.LeaderChanged("y", "frozen", at(0), time.Time{}, settled)
	r.LeaderChanged("y", "", at(time.Minute), at(time.Minute-time.Second), settled)
	return r, at
}

// When the group elects twice while its leader is frozen (a leader that
// held for a moment, then lost its place too), the third leader counts
// both lost leaders from when it last heard from each; a leader that held
// for the settled while had counted the servers itself, so the ones lost
// before it are not counted from their silence again.
func TestReach_ANewTermCountsEveryLeaderLostSinceASettledOne(t *testing.T) {
	const settled = 1500 * time.Millisecond
	r, at := frozenLeaderLost(settled)
	r.LeaderChanged("y", "x", at(time.Minute+300*time.Millisecond), time.Time{}, settled)                         // x elected
	r.LeaderChanged("y", "", at(time.Minute+900*time.Millisecond), at(time.Minute+700*time.Millisecond), settled) // x lost
	now := at(time.Minute + 1200*time.Millisecond)
	r.LeaderChanged("y", "y", now, time.Time{}, settled)
	r.Reset(now, now.Add(-time.Hour))
	if s := r.SilentFor("frozen", now); s != 2200*time.Millisecond {
		t.Errorf("the frozen leader silent for %v, want 2.2s: from when it was last heard, not from this term", s)
	}
	if s := r.SilentFor("x", now); s != 500*time.Millisecond {
		t.Errorf("the short-lived leader silent for %v, want 500ms", s)
	}
	if r.WasLeader() != true {
		t.Error("WasLeader false after this node's own election")
	}

	// y leads for the settled while, then follows z, who is lost at once:
	// only z is counted from its silence at y's next term.
	r.LeaderChanged("y", "z", now.Add(settled), time.Time{}, settled)
	r.LeaderChanged("y", "", now.Add(settled+time.Second), now.Add(settled+500*time.Millisecond), settled)
	next := now.Add(settled + 2*time.Second)
	r.LeaderChanged("y", "y", next, time.Time{}, settled)
	r.Reset(next, next.Add(-time.Hour))
	if s := r.SilentFor("frozen", next); s != 0 {
		t.Errorf("a leader lost before a settled one silent for %v at the next term, want 0", s)
	}
	if s := r.SilentFor("z", next); s != 1500*time.Millisecond {
		t.Errorf("z silent for %v, want 1.5s", s)
	}
}

// A follower notices that its leader is gone a heartbeat timeout after
// the leader last sent: a leader that stepped down 1.2 s into its term
// (it reached no quorum while a frozen node was still being counted) is
// seen lost 1.8 s into it. It did not hold its place for the settled
// while, so the frozen leader before it is still counted from its
// silence at this node's term.
func TestReach_ALeaderHeldItsPlaceUntilItWasLastHeard(t *testing.T) {
	const settled = 1500 * time.Millisecond
	r, at := frozenLeaderLost(settled)
	r.LeaderChanged("y", "x", at(time.Minute+100*time.Millisecond), time.Time{}, settled)
	// x last heard 1.2 s into its term, seen gone 1.8 s into it.
	r.LeaderChanged("y", "", at(time.Minute+1900*time.Millisecond), at(time.Minute+1300*time.Millisecond), settled)
	now := at(time.Minute + 2500*time.Millisecond)
	r.LeaderChanged("y", "y", now, time.Time{}, settled)
	r.Reset(now, now.Add(-time.Hour))
	if s := r.SilentFor("frozen", now); s != 3500*time.Millisecond {
		t.Errorf("the frozen leader silent for %v at this term, want 3.5s: from when it was last heard", s)
	}
}

// A node's metadata fits memberlist's limit: what it leads goes, then
// what raft does not reach, and at the limit the leads are left out.
func TestNodeMeta_LeadsWithinTheLimitAndLeftOutPastIt(t *testing.T) {
	g := New(Config{NodeID: "n1", GRPCAddr: "10.0.0.1:5680", AMQPAddr: "10.0.0.1:5672", Logger: slog.New(slog.DiscardHandler)})
	leads := func(k int) []*proto.GroupLead {
		var out []*proto.GroupLead
		for i := range k {
			out = append(out, &proto.GroupLead{Group: "q" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Term: uint64(1000 + i)})
		}
		return out
	}
	decode := func(b []byte) *proto.NodeMeta {
		t.Helper()
		m := &proto.NodeMeta{}
		if err := gproto.Unmarshal(b, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if err := g.SetLeads(leads(3), time.Second); err != nil {
		t.Fatal(err)
	}
	m := decode(delegate{g}.NodeMeta(memberlist.MetaMaxSize))
	if len(m.GetLeads()) != 3 || m.GetLeads()[2].GetGroup() != "qca" || m.GetLeads()[2].GetTerm() != 1002 || m.GetId() != "n1" {
		t.Fatalf("meta %v, want three leads", m)
	}
	if err := g.SetLeads(leads(64), time.Second); err != nil {
		t.Fatal(err)
	}
	b := delegate{g}.NodeMeta(memberlist.MetaMaxSize)
	if m := decode(b); len(b) > memberlist.MetaMaxSize || len(m.GetLeads()) != 0 || m.GetGrpcAddr() != "10.0.0.1:5680" {
		t.Fatalf("%d bytes, meta %v: want the addresses within %d bytes and no leads", len(b), m, memberlist.MetaMaxSize)
	}
}

// An idle group's leader sends a fresh follower every other heartbeat
// (group.QuietAppends: the window is HeartbeatTimeout/5, raft's
// heartbeats come every HeartbeatTimeout/10 to /5), so the RPCs the
// reach hears of can be 2×HeartbeatTimeout/5 apart. A live server must
// not read as unreached between two of them, with room for a late one.
func TestUnreachedAfter_OutlastsTheGapBetweenHeartbeatsThatGo(t *testing.T) {
	for _, c := range []struct{ hb, down time.Duration }{
		{500 * time.Millisecond, 1500 * time.Millisecond}, // raftmq's defaults
		{300 * time.Millisecond, time.Second},             // the test clusters'
		{50 * time.Millisecond, 100 * time.Millisecond},   // the least --raft-timeout
		{2 * time.Second, 10 * time.Second},
	} {
		gap := 2 * (c.hb / 5)
		if got := UnreachedAfter(c.hb, c.down); got < gap+c.hb/10 || got >= c.down {
			t.Errorf("UnreachedAfter(%v, %v) = %v: want at least %v (the gap %v and half a heartbeat interval) and under NodeDownAfter",
				c.hb, c.down, got, gap+c.hb/10, gap)
		}
	}
}

// A member cut off long enough for the others to declare it dead, which
// itself declared no one dead, is alive to them again soon after the cut
// heals. memberlist alone would tell it that it was declared dead only at
// its next push-pull (here an hour away), and until then it is not
// alone, so it does not join again; the others reach out to it.
func TestGossip_AMemberDeclaredDeadIsAliveSoonAfterTheCutHeals(t *testing.T) {
	fast := func(c *memberlist.Config) {
		c.ProbeInterval = 50 * time.Millisecond
		c.ProbeTimeout = 25 * time.Millisecond
		c.SuspicionMult = 1
		c.SuspicionMaxTimeoutMult = 1
		c.GossipInterval = 20 * time.Millisecond
		c.PushPullInterval = time.Hour
		c.TCPTimeout = 500 * time.Millisecond
		c.GossipToTheDeadTime = 50 * time.Millisecond
	}
	// The one cut off takes minutes to declare anyone dead.
	slow := func(c *memberlist.Config) {
		fast(c)
		c.SuspicionMult = 10000
	}
	type node struct {
		id string
		g  *Gossip
		l  *links.Links
	}
	start := func(id string, tune func(*memberlist.Config), join []string) node {
		l := links.New()
		g := startGossip(t, id, tune, join, func(tr memberlist.Transport) memberlist.Transport { return links.Gossip(tr, l) })
		return node{id: id, g: g, l: l}
	}
	a := start("a", slow, nil)
	b := start("b", fast, []string{a.g.Addr()})
	c := start("c", fast, []string{a.g.Addr()})
	nodes := []node{a, b, c}
	health := func(of node, id string) string {
		m, _ := of.g.Members().Get(id)
		return m.Health
	}
	waitFor := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, within)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	allAlive := func() bool {
		for _, n := range nodes {
			for _, o := range nodes {
				if o.id != n.id && health(n, o.id) != HealthAlive {
					return false
				}
			}
		}
		return true
	}
	waitFor("every member alive to every other", 10*time.Second, allAlive)

	a.l.Block(b.g.Addr(), c.g.Addr())
	b.l.Block(a.g.Addr())
	c.l.Block(a.g.Addr())
	waitFor("a dead to b and c", 10*time.Second, func() bool {
		return health(b, "a") == HealthDead && health(c, "a") == HealthDead
	})
	// The cut outlasts the death by far more than b and c retransmit it
	// (a few gossip rounds) and gossip to the dead: after it, nothing b
	// and c send on their own tells a what they hold.
	time.Sleep(time.Second)
	if h := health(a, "b") + "/" + health(a, "c"); h != HealthAlive+"/"+HealthAlive {
		t.Fatalf("a declared b/c %s: the test needs a that declared no one dead", h)
	}
	for _, n := range nodes {
		n.l.Heal()
	}
	waitFor("every member alive to every other after the cut", 5*time.Second, allAlive)
}

// packetKinds is a memberlist transport that records the kind of every
// packet its node sends (memberlist's message type, after the CRC header
// when there is one).
type packetKinds struct {
	memberlist.Transport
	mu    sync.Mutex
	kinds map[byte]int
}

func (p *packetKinds) WriteTo(b []byte, addr string) (time.Time, error) {
	const hasCrc, crcHeader = 12, 5
	kind := b[0]
	if kind == hasCrc && len(b) > crcHeader {
		kind = b[crcHeader]
	}
	p.mu.Lock()
	p.kinds[kind]++
	p.mu.Unlock()
	return p.Transport.WriteTo(b, addr)
}

func (p *packetKinds) count(kind byte) (of, all int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, n := range p.kinds {
		if k == kind {
			of += n
		}
		all += n
	}
	return of, all
}

// A node sends its packets uncompressed (a probe's ping and ack gain
// nothing from it, and each compression allocated a 64 KiB table), and
// still reads the compressed packets of a node of an earlier release, so
// a rolling upgrade keeps every member alive to every other.
func TestGossip_PacketsGoUncompressedAndCompressedOnesAreRead(t *testing.T) {
	const compressMsg = 9 // memberlist's message type of a compressed packet
	fast := func(c *memberlist.Config) {
		c.ProbeInterval = 20 * time.Millisecond
		c.ProbeTimeout = 100 * time.Millisecond
		c.GossipInterval = 20 * time.Millisecond
	}
	earlier := func(c *memberlist.Config) {
		fast(c)
		c.EnableCompression = true
	}
	start := func(id string, tune func(*memberlist.Config), join []string) (*Gossip, *packetKinds) {
		sent := &packetKinds{kinds: map[byte]int{}}
		g := startGossip(t, id, tune, join, func(tr memberlist.Transport) memberlist.Transport { sent.Transport = tr; return sent })
		return g, sent
	}
	old, oldSent := start("old", earlier, nil)
	cur, curSent := start("new", fast, []string{old.Addr()})
	alive := func(of *Gossip, id string) bool {
		m, ok := of.Members().Get(id)
		return ok && m.Health == HealthAlive
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		oldCompressed, _ := oldSent.count(compressMsg)
		_, curAll := curSent.count(compressMsg)
		if alive(old, "new") && alive(cur, "old") && oldCompressed >= 1 && curAll >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 10 s: old sees new alive %v, new sees old alive %v; old sent %d compressed, new sent %d packets",
				alive(old, "new"), alive(cur, "old"), oldCompressed, curAll)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, all := curSent.count(compressMsg); n > 0 {
		t.Fatalf("this release compressed %d of its %d packets", n, all)
	}
	// Both still see each other after all those probes: the compressed
	// ones were read, or new would have suspected old.
	if !alive(old, "new") || !alive(cur, "old") {
		t.Fatal("a member is no longer alive to the other")
	}
}

// startGossip starts a member named id with tune and transport, joining
// join, and stops it when the test ends.
func startGossip(t *testing.T, id string, tune func(*memberlist.Config), join []string, transport func(memberlist.Transport) memberlist.Transport) *Gossip {
	t.Helper()
	g := New(Config{
		NodeID:            id,
		DataDir:           t.TempDir(),
		GossipAddr:        "127.0.0.1:0",
		Join:              join,
		JoinRetryInterval: 50 * time.Millisecond,
		Tune:              tune,
		Transport:         transport,
		Logger:            slog.New(slog.DiscardHandler),
		MemberlistLogger:  log.New(io.Discard, "", 0),
		Changed:           func() {},
	})
	if err := g.Start("127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	closing := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(closing)
	}()
	t.Cleanup(func() {
		close(closing)
		<-done
		g.Shutdown()
	})
	return g
}

// lockedBuffer is a log sink written by Run's goroutine and read by the
// test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A new node whose seeds never answer waits for them (it starts no
// cluster of its own) and says so as a warning once joins have failed
// for JoinWarnAfter: at debug level alone, a wrong --join left it
// waiting without a word. The warning is not repeated at every attempt.
func TestGossip_ANodeWhoseSeedsNeverAnswerWarns(t *testing.T) {
	// A port that refuses: bound, then closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seed := l.Addr().String()
	_ = l.Close()
	var out lockedBuffer
	var dials atomic.Int64
	g := New(Config{
		NodeID:            "fresh",
		DataDir:           t.TempDir(),
		GossipAddr:        "127.0.0.1:0",
		Join:              []string{seed},
		JoinRetryInterval: 10 * time.Millisecond,
		JoinWarnAfter:     200 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn})),
		MemberlistLogger:  log.New(io.Discard, "", 0),
		Changed:           func() {},
		Transport: func(tr memberlist.Transport) memberlist.Transport {
			return countingDials{tr, &dials}
		},
	})
	if err := g.Start("127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown()
	closing := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(closing)
	}()
	const want = "no node to join answers yet: a new node waits for one"
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning after 10 s of failed joins; logged:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Past the first warning, the next waits twice as long: many more
	// attempts fail meanwhile than warnings are written.
	from := dials.Load()
	for dials.Load() < from+40 {
		if time.Now().After(deadline) {
			t.Fatalf("%d joins tried since the warning", dials.Load()-from)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(closing)
	<-done
	if g.Joined() {
		t.Fatal("joined a seed that does not exist")
	}
	k, tried := strings.Count(out.String(), want), dials.Load()
	if k > int(tried)/8 || !strings.Contains(out.String(), seed) {
		t.Fatalf("%d warnings for %d joins tried, naming the seed %s or not:\n%s", k, tried, seed, out.String())
	}
}

// countingDials counts the connections memberlist dials (a join's
// push-pull is one).
type countingDials struct {
	memberlist.Transport
	n *atomic.Int64
}

func (c countingDials) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	c.n.Add(1)
	return c.Transport.DialTimeout(addr, timeout)
}

// A node that stops while it gossips a change (a leadership handed over
// at the stop) does not wait for the broadcast: memberlist waits out
// the whole timeout for one that a gossip shut down never sends, and
// the node's stop waited with it, a second for each such change.
func TestGossip_AnUpdateInFlightEndsWithTheShutdown(t *testing.T) {
	// a's gossip rounds, which send its broadcasts, never come.
	a := startGossip(t, "a", func(c *memberlist.Config) { c.GossipInterval = time.Hour }, nil, nil)
	startGossip(t, "b", nil, []string{a.Addr()}, nil)
	deadline := time.Now().Add(10 * time.Second)
	for m, _ := a.Members().Get("b"); m.Health != HealthAlive; m, _ = a.Members().Get("b") {
		if time.Now().After(deadline) {
			t.Fatal("a never found b alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- a.SetLeads([]*proto.GroupLead{{Group: "q1", Term: 2}}, 20*time.Second) }()
	a.Shutdown()
	if err := <-done; !errors.Is(err, ErrStopped) {
		t.Fatalf("an update in flight at the shutdown returned %v, want %v", err, ErrStopped)
	}
	if err := a.Update(20 * time.Second); !errors.Is(err, ErrStopped) {
		t.Fatalf("an update after the shutdown returned %v, want %v", err, ErrStopped)
	}
}
