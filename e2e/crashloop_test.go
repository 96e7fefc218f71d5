package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/api/client"
	"github.com/raftmq/raftmq/proto"
)

// The crash loop's topology: a plain queue consumed on every node, and a
// queue nobody consumes whose messages all die into crashDead.
const (
	crashWork = "crash.work"
	crashTTL  = "crash.ttl"
	crashDead = "crash.dead"
	crashDLX  = "crash.dlx"
	// crashTTLFor is crashTTL's x-message-ttl.
	crashTTLFor = 2 * time.Second
)

// Fault kinds of the crash loop.
const (
	killOne    = "kill-random"  // kill -9 of a random node
	killLeader = "kill-leader"  // kill -9 of the leader, three times in a row
	powerCut   = "power-cut"    // kill -9 of all three at once
	noFault    = "before-fault" // the load before the first fault
)

// crashPlan is how many rounds of each kind one run makes, shuffled by the
// seed; about three minutes on a two-core machine.
var crashPlan = map[string]int{killOne: 24, killLeader: 12, powerCut: 12}

// crashBudget stops injecting faults once spent (a slow machine runs fewer
// rounds; the table says how many ran).
const crashBudget = 150 * time.Second

// TestCrashLoop kills raftmq processes with SIGKILL at random moments under
// confirmed load, many times in a row: a random node, the leader again and
// again, all three at once. After every round each node must start again,
// and at the end every confirmed message must have been delivered from its
// queue or dead-lettered (duplicates are allowed, losses are not).
// RAFTMQ_CRASH_SEED replays a run.
//
// The table gives per fault kind how late dead letters reached a client
// and whether that met the fault suite's 2 s target (crashLateTarget),
// reported, not asserted: it is a speed figure on a shared machine.
// RAFTMQ_CRASH_DUMP names a folder for the run's timeline and the nodes'
// logs (dumpCrash).
func TestCrashLoop(t *testing.T) {
	skipShort(t)
	runCrashLoop(t, crashLoop{plan: crashPlan, budget: crashBudget,
		start:  func(t *testing.T) *Cluster { return StartCluster(t, 3) },
		leader: func(_ *testing.T, c *Cluster) (int, error) { return crashLeader(c) }})
}

// TestCrashLoop_QueueGroups is the crash loop on three nodes whose queues
// are placed into three queue groups: each node's restart replays the
// groups it is a member of and releases its previous run's consumers in
// each, and crash.ttl's dead letters go to crash.dead through the
// hand-off between groups whenever the two were placed apart. A
// kill-leader round kills the leader of crash.ttl's group, where its
// deaths are decided. Shorter than TestCrashLoop: the same faults, fewer
// of them.
func TestCrashLoop_QueueGroups(t *testing.T) {
	skipShort(t)
	runCrashLoop(t, crashLoop{plan: map[string]int{killOne: 8, killLeader: 4, powerCut: 4}, budget: 60 * time.Second,
		start: placed3.start, leader: crashGroupLeader(crashTTL)})
}

// crashLoop is what a run of the crash loop varies.
type crashLoop struct {
	plan   map[string]int // rounds of each fault kind
	budget time.Duration  // no fault is injected once it is spent
	start  func(t *testing.T) *Cluster
	// leader is the node a kill-leader round kills.
	leader func(t *testing.T, c *Cluster) (int, error)
}

func runCrashLoop(t *testing.T, cl crashLoop) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RAFTMQ_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RAFTMQ_CRASH_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("crash loop seed %d (replay with RAFTMQ_CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	c := cl.start(t)
	declareCrashTopology(t, c)
	rec := &crashRecorder{sent: map[string]*crashSent{}, got: map[string]time.Time{},
		redelivered: map[string]bool{}, node: map[string]int{}}
	load := startCrashLoad(c, rec)
	defer load.stop()
	if err := Eventually(30*time.Second, func() error {
		if n := rec.confirmedCount(); n < 100 {
			return fmt.Errorf("%d confirmed", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("load does not start: %v", err)
	}

	var plan []string
	for _, kind := range []string{killOne, killLeader, powerCut} {
		for range cl.plan[kind] {
			plan = append(plan, kind)
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })

	rounds := []crashRound{{kind: noFault, start: rec.firstPublish()}}
	began := time.Now()
	for r, kind := range plan {
		if time.Since(began) > cl.budget {
			t.Logf("fault budget of %v spent after %d rounds", cl.budget, r)
			break
		}
		// A random moment of the load.
		time.Sleep(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
		round := crashRound{kind: kind, start: time.Now()}
		rounds = append(rounds, round)
		cur := &rounds[len(rounds)-1]
		fail := func(i int, err error) {
			cur.notBack = true
			load.stop()
			t.Fatalf("round %d (%s, seed %d): node %s did not come back: %v\n---- %s log (tail) ----\n%s",
				r+1, kind, seed, c.Nodes[i].ID, err, c.Nodes[i].ID, c.LogTail(i, 16384))
		}
		switch kind {
		case killOne:
			i := rng.IntN(len(c.Nodes))
			c.Kill(i)
			time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
			if err := restartNode(c, i); err != nil {
				fail(i, err)
			}
		case killLeader:
			for range 3 {
				i, err := cl.leader(t, c)
				if err != nil {
					t.Fatalf("round %d (%s, seed %d): %v", r+1, kind, seed, err)
				}
				c.Kill(i)
				if err := restartNode(c, i); err != nil {
					fail(i, err)
				}
			}
		case powerCut:
			var wg sync.WaitGroup
			for i := range c.Nodes {
				wg.Add(1)
				go func() { defer wg.Done(); c.Kill(i) }()
			}
			wg.Wait()
			time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
			for i := range c.Nodes {
				c.Start(i)
			}
			for i := range c.Nodes {
				err := c.waitReady(i, 60*time.Second)
				if errors.Is(err, errExited) && portTaken(c, i) {
					err = restartNode(c, i)
				}
				if err != nil {
					fail(i, err)
				}
			}
		}
		cur.back = time.Now()
	}
	faultsEnd := time.Now()
	// Load on the whole cluster again for a while (a spell of load, not a
	// wait for a condition) before publishing stops.
	time.Sleep(3 * time.Second)
	load.stopPublishing()
	publishEnd := time.Now()

	err := Eventually(90*time.Second, func() error {
		if n := rec.missing(); n > 0 {
			return fmt.Errorf("%d confirmed messages neither delivered nor dead-lettered", n)
		}
		return nil
	})
	load.stop()

	rows := rec.summarize(rounds, publishEnd)
	var tbl strings.Builder
	writeCrashTable(&tbl, rows)
	t.Logf("crash loop (seed %d, %d rounds in %v, published %d, confirmed %d, lost %d):\n%s",
		seed, len(rounds)-1, faultsEnd.Sub(began).Round(time.Second), rec.publishedCount(), rec.confirmedCount(), rec.missing(), tbl.String())
	var per strings.Builder
	writeCrashRounds(&per, rounds, rec.perRound(rounds, publishEnd), leaderTerms(c))
	t.Logf("crash loop rounds:\n%s", per.String())
	if path := os.Getenv("RAFTMQ_FAULT_REPORT"); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintf(f, "%s (e2e, processes on loopback; seed %d):\n%s\n", t.Name(), seed, tbl.String())
			f.Close()
		}
	}
	if d := os.Getenv("RAFTMQ_CRASH_DUMP"); d != "" {
		dumpCrash(t, d, c, rec, rounds)
	}
	if err != nil {
		for _, id := range rec.missingIDs(20) {
			t.Errorf("confirmed message %s was lost", id)
		}
		t.Fatalf("seed %d: %v", seed, err)
	}
}

// restartNode starts node i again and waits until it is ready. A node
// that exits because another process took one of its ports meanwhile
// (ports are kept across restarts) is started again: that is the test
// machine, not the node.
func restartNode(c *Cluster, i int) error {
	for attempt := 1; ; attempt++ {
		c.Start(i)
		err := c.waitReady(i, 60*time.Second)
		if err == nil || attempt == 5 || !errors.Is(err, errExited) || !portTaken(c, i) {
			return err
		}
	}
}

// portTaken reports whether node i's last start failed on a port in use.
func portTaken(c *Cluster, i int) bool {
	return strings.Contains(c.LogTail(i, 1024), "address already in use")
}

// crashRound is one fault and the load until the next.
type crashRound struct {
	kind    string
	start   time.Time
	back    time.Time // every node it killed is ready again
	notBack bool
}

// crashLeader asks the running nodes who leads and returns its index.
func crashLeader(c *Cluster) (int, error) {
	idx := -1
	err := Eventually(30*time.Second, func() error {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			st, err := crashStatus(n)
			if err != nil || st.LeaderId == "" {
				continue
			}
			for j, m := range c.Nodes {
				if m.ID == st.LeaderId {
					idx = j
					return nil
				}
			}
		}
		return errors.New("no node names a leader")
	})
	return idx, err
}

// crashGroupLeader is the leader of queue's group, as a running node's
// raftmqctl shows it.
func crashGroupLeader(queue string) func(t *testing.T, c *Cluster) (int, error) {
	return func(t *testing.T, c *Cluster) (int, error) {
		idx := -1
		err := Eventually(30*time.Second, func() error {
			for _, n := range c.Nodes {
				if !n.Running() {
					continue
				}
				rows, err := queuesOn(t, n)
				if err != nil {
					continue
				}
				leader := rows[queue].Leader
				if i := slices.IndexFunc(c.Nodes, func(m *Node) bool { return m.ID == leader }); i >= 0 {
					idx = i
					return nil
				}
			}
			return fmt.Errorf("no node names the leader of %s's group", queue)
		})
		return idx, err
	}
}

func crashStatus(n *Node) (*proto.ClusterStatusResponse, error) {
	secret, err := client.ReadSecret(filepath.Join(n.DataDir, client.SecretFileName))
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(n.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(client.SecretCredentials{Secret: secret}))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return proto.NewAdminClient(cc).ClusterStatus(ctx, &proto.ClusterStatusRequest{})
}

func declareCrashTopology(t *testing.T, c *Cluster) {
	t.Helper()
	ch := channel(t, dial(t, c.Nodes[0]))
	mustDeclare(t, ch, crashWork, nil)
	declareDeadLetters(t, ch, crashTTL, crashTTLFor, crashDLX, crashDead)
}

// crashSent is one publish as its client saw it.
type crashSent struct {
	ttl       bool // to crashTTL
	at        time.Time
	confirmed time.Time
}

// crashRecorder is what the load's clients saw.
type crashRecorder struct {
	mu       sync.Mutex
	sent     map[string]*crashSent
	confirms []time.Time
	got      map[string]time.Time // first receipt of each id, from its queue or dead-lettered
	// redelivered: that first receipt carried the redelivered flag.
	redelivered map[string]bool
	node        map[string]int // the node of that first receipt's consumer
}

func (r *crashRecorder) published(id string, s *crashSent) {
	r.mu.Lock()
	r.sent[id] = s
	r.mu.Unlock()
}

func (r *crashRecorder) confirmed(id string, at time.Time) {
	r.mu.Lock()
	if s := r.sent[id]; s != nil {
		s.confirmed = at
		r.confirms = append(r.confirms, at)
	}
	r.mu.Unlock()
}

func (r *crashRecorder) received(id string, at time.Time, node int, redelivered bool) {
	r.mu.Lock()
	if _, ok := r.got[id]; !ok {
		r.got[id] = at
		r.node[id] = node
		r.redelivered[id] = redelivered
	}
	r.mu.Unlock()
}

func (r *crashRecorder) confirmedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.confirms)
}

func (r *crashRecorder) publishedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sent)
}

func (r *crashRecorder) firstPublish() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, s := range r.sent {
		if first.IsZero() || s.at.Before(first) {
			first = s.at
		}
	}
	return first
}

func (r *crashRecorder) missing() int { return len(r.missingIDs(-1)) }

// missingIDs lists up to max (all when negative) confirmed ids never
// received.
func (r *crashRecorder) missingIDs(max int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, s := range r.sent {
		if _, ok := r.got[id]; !ok && !s.confirmed.IsZero() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if max >= 0 && len(ids) > max {
		ids = ids[:max]
	}
	return ids
}

// crashRow is one fault kind's line of the table.
type crashRow struct {
	kind     string
	rounds   int
	maxPause time.Duration // longest stretch without a confirm in its rounds
	// The dead letters due in its rounds: latenessP99 over those confirmed
	// within crashFastConfirm (the fault suite's measure), lateAll over
	// every confirmed one; lateFirst and lateRedelivered count those more
	// than crashLateTarget late by whether their first delivery reached
	// the client (the expiry was decided late) or a consumer that died
	// held them first.
	samples, all               int
	latenessP99, lateAll       time.Duration
	lateFirst, lateRedelivered int
	allBack                    bool
}

// The dead-letter lateness target, as the fault suite's: the 99th
// percentile, over messages confirmed within crashFastConfirm of their
// send (a publish held up by the fault was stamped, and its TTL started,
// at some unknown moment before its confirm), at most crashLateTarget
// after send time plus TTL. It applies where a majority of the nodes
// runs: during a power cut nothing runs to decide a death, and a death
// due then is late by what remains of the outage and the restart.
const (
	crashFastConfirm = 200 * time.Millisecond
	crashLateTarget  = 2 * time.Second
)

// summarize groups the rounds by kind. Each round runs from its fault to
// the next round's (the last one to publishEnd). A dead letter belongs to
// the round its deadline (send time plus TTL) falls in: that round's
// fault is what it met when it fell due, while its publish may lie in the
// round before (a message sent just before a power cut dies in it).
func (r *crashRecorder) summarize(rounds []crashRound, publishEnd time.Time) []crashRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	confirms := slices.Clone(r.confirms)
	slices.SortFunc(confirms, func(a, b time.Time) int { return a.Compare(b) })
	end := func(i int) time.Time {
		if i+1 < len(rounds) {
			return rounds[i+1].start
		}
		return publishEnd
	}
	rows := map[string]*crashRow{}
	fast := map[string][]time.Duration{}
	all := map[string][]time.Duration{}
	var order []string
	for i, rd := range rounds {
		row := rows[rd.kind]
		if row == nil {
			row = &crashRow{kind: rd.kind, allBack: true}
			rows[rd.kind] = row
			order = append(order, rd.kind)
		}
		row.rounds++
		row.allBack = row.allBack && !rd.notBack
		if g := longestGap(confirms, rd.start, end(i)); g > row.maxPause {
			row.maxPause = g
		}
	}
	for id, s := range r.sent {
		got, ok := r.got[id]
		if !s.ttl || !ok || s.confirmed.IsZero() {
			continue
		}
		due := s.at.Add(crashTTLFor)
		for i := len(rounds) - 1; i >= 0; i-- {
			if due.Before(rounds[i].start) && i > 0 {
				continue
			}
			k, late := rounds[i].kind, got.Sub(due)
			all[k] = append(all[k], late)
			if s.confirmed.Sub(s.at) <= crashFastConfirm {
				fast[k] = append(fast[k], late)
			}
			if late > crashLateTarget {
				if r.redelivered[id] {
					rows[k].lateRedelivered++
				} else {
					rows[k].lateFirst++
				}
			}
			break
		}
	}
	var out []crashRow
	for _, k := range order {
		row := rows[k]
		row.samples, row.all = len(fast[k]), len(all[k])
		row.latenessP99, row.lateAll = p99(fast[k]), p99(all[k])
		if k == noFault {
			row.rounds = 0
		}
		out = append(out, *row)
	}
	return out
}

// target says whether the row met crashLateTarget: "n/a" for power cuts
// (see crashLateTarget) and for a kind with no dead letters due in it.
func (r crashRow) target() string {
	switch {
	case r.kind == powerCut || r.samples == 0:
		return "n/a"
	case r.latenessP99 > crashLateTarget:
		return fmt.Sprintf("%v MISSED", crashLateTarget)
	}
	return fmt.Sprintf("%v met", crashLateTarget)
}

// roundLate is one round's dead letters: those due in it and confirmed
// within crashFastConfirm, their p99 and longest lateness.
type roundLate struct {
	due      int
	p99, max time.Duration
}

// perRound gives each round's roundLate, as summarize counts them.
func (r *crashRecorder) perRound(rounds []crashRound, publishEnd time.Time) []roundLate {
	r.mu.Lock()
	defer r.mu.Unlock()
	late := make([][]time.Duration, len(rounds))
	for id, s := range r.sent {
		got, ok := r.got[id]
		if !s.ttl || !ok || s.confirmed.IsZero() || s.confirmed.Sub(s.at) > crashFastConfirm {
			continue
		}
		due := s.at.Add(crashTTLFor)
		i := len(rounds) - 1
		for i > 0 && due.Before(rounds[i].start) {
			i--
		}
		late[i] = append(late[i], got.Sub(due))
	}
	out := make([]roundLate, len(rounds))
	for i, ls := range late {
		out[i] = roundLate{due: len(ls), p99: p99(ls)}
		for _, l := range ls {
			out[i].max = max(out[i].max, l)
		}
	}
	return out
}

// leaderTerm is a term's "leading" line in a node's log: when the new
// leader's loops started, its barrier (a restarted node's replay), and
// how long log time had gone without a stamp, the stretch in which
// nothing fell due.
type leaderTerm struct {
	at               time.Time
	node             string
	barrier, noStamp time.Duration
}

// leaderTerms reads every node's log for its terms.
func leaderTerms(c *Cluster) []leaderTerm {
	var terms []leaderTerm
	for _, n := range c.Nodes {
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, "msg=leading ") {
				continue
			}
			term := leaderTerm{node: n.ID}
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "time":
					term.at, _ = time.Parse(time.RFC3339Nano, v)
				case "barrier":
					term.barrier, _ = time.ParseDuration(v)
				case "since_last_stamp":
					term.noStamp, _ = time.ParseDuration(v)
				}
			}
			terms = append(terms, term)
		}
	}
	slices.SortFunc(terms, func(a, b leaderTerm) int { return a.at.Compare(b.at) })
	return terms
}

// writeCrashRounds prints a line per round: how long the nodes it killed
// took to be ready again, its dead letters (as roundLate), and the terms
// begun in it: how many, the longest stretch without a stamp (from the
// last entry before the fault to the new leader's loops: the election
// and the barrier) and the longest barrier.
func writeCrashRounds(w io.Writer, rounds []crashRound, late []roundLate, terms []leaderTerm) {
	fmt.Fprintf(w, "%5s %-12s %8s %5s %9s %9s %5s %13s %11s\n", "round", "fault", "outage", "due", "late-p99", "late-max", "terms", "no-stamp-max", "barrier-max")
	for i, rd := range rounds {
		if i == 0 {
			continue
		}
		var n int
		var noStamp, barrier time.Duration
		for _, term := range terms {
			if term.at.Before(rd.start) || (i+1 < len(rounds) && !term.at.Before(rounds[i+1].start)) {
				continue
			}
			n++
			noStamp, barrier = max(noStamp, term.noStamp), max(barrier, term.barrier)
		}
		outage := "-"
		if !rd.back.IsZero() {
			outage = rd.back.Sub(rd.start).Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "%5d %-12s %8s %5d %9v %9v %5d %13v %11v\n", i, rd.kind, outage, late[i].due,
			late[i].p99.Round(time.Millisecond), late[i].max.Round(time.Millisecond), n,
			noStamp.Round(time.Millisecond), barrier.Round(time.Millisecond))
	}
}

// longestGap is the longest stretch of [from, to] without a time of ts
// (sorted).
func longestGap(ts []time.Time, from, to time.Time) time.Duration {
	prev, longest := from, time.Duration(0)
	for _, at := range ts {
		if at.Before(from) {
			continue
		}
		if at.After(to) {
			break
		}
		longest = max(longest, at.Sub(prev))
		prev = at
	}
	return max(longest, to.Sub(prev))
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[int(0.99*float64(len(ds)-1)+0.5)]
}

// writeCrashTable prints a row per fault kind: death-late-p99 is over the
// dead letters due in its rounds and confirmed within crashFastConfirm
// (samples), p99-all over every confirmed one; late-first and
// late-redeliv count those more than crashLateTarget late whose first
// delivery was the one received, and those a consumer that died held
// first.
func writeCrashTable(w io.Writer, rows []crashRow) {
	fmt.Fprintf(w, "%-14s %6s %16s %15s %11s %8s %8s %10s %12s %15s\n", "fault", "rounds", "max-confirm-gap",
		"death-late-p99", "p99-target", "samples", "p99-all", "late-first", "late-redeliv", "all-nodes-back")
	for _, r := range rows {
		back := "yes"
		if !r.allBack {
			back = "NO"
		}
		fmt.Fprintf(w, "%-14s %6d %16v %15v %11s %8d %8v %10d %12d %15s\n", r.kind, r.rounds,
			r.maxPause.Round(time.Millisecond), r.latenessP99.Round(time.Millisecond), r.target(), r.samples,
			r.lateAll.Round(time.Millisecond), r.lateFirst, r.lateRedelivered, back)
	}
}

// crashLoad is the clients: a confirming publisher starting on each node,
// consumers of crashWork and crashDead on each node. A client whose node
// goes away moves to the next one.
type crashLoad struct {
	c      *Cluster
	rec    *crashRecorder
	pctx   context.Context
	stopP  context.CancelFunc
	cctx   context.Context
	stopC  context.CancelFunc
	pubs   sync.WaitGroup
	cons   sync.WaitGroup
	closed sync.Once
}

// Load settings: each publisher sends one message per publishEvery, with
// at most crashWindow unconfirmed; one that waits crashConfirmWait for a
// confirm gives up on its node.
const (
	crashPublishEvery = 10 * time.Millisecond
	crashWindow       = 64
	crashConfirmWait  = 5 * time.Second
	crashPrefetch     = 50
)

func startCrashLoad(c *Cluster, rec *crashRecorder) *crashLoad {
	l := &crashLoad{c: c, rec: rec}
	l.pctx, l.stopP = context.WithCancel(context.Background())
	l.cctx, l.stopC = context.WithCancel(context.Background())
	for i := range c.Nodes {
		l.cons.Add(2)
		go l.consume(i, crashWork)
		go l.consume(i, crashDead)
		l.pubs.Add(1)
		go l.publish(i)
	}
	return l
}

func (l *crashLoad) stopPublishing() {
	l.stopP()
	l.pubs.Wait()
}

func (l *crashLoad) stop() {
	l.closed.Do(func() {
		l.stopPublishing()
		l.stopC()
		l.cons.Wait()
	})
}

// crashDial connects with a bounded handshake and a short heartbeat, so a
// client of a killed node notices at once.
func crashDial(n *Node) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.DialConfig(n.AMQPURL(), amqp.Config{
		Heartbeat: 2 * time.Second,
		Dial:      amqp.DefaultDial(2 * time.Second),
	})
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

func wait(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (l *crashLoad) publish(p int) {
	defer l.pubs.Done()
	seq := 0
	for attempt := p; l.pctx.Err() == nil; attempt++ {
		if err := l.publishOn(p, l.c.Nodes[attempt%len(l.c.Nodes)], &seq); err != nil {
			wait(l.pctx, 100*time.Millisecond)
		}
	}
}

func (l *crashLoad) publishOn(p int, n *Node, seq *int) error {
	conn, ch, err := crashDial(n)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, crashWindow))
	var pending []string // ids in delivery-tag order
	tick := time.NewTicker(crashPublishEvery)
	defer tick.Stop()
	progress := time.Now()
	for {
		var ticks <-chan time.Time
		if len(pending) < crashWindow && l.pctx.Err() == nil {
			ticks = tick.C
		}
		if l.pctx.Err() != nil && len(pending) == 0 {
			return nil
		}
		select {
		case cf, ok := <-confirms:
			if !ok {
				return errors.New("channel closed")
			}
			id := pending[0]
			pending = pending[1:]
			if cf.Ack {
				l.rec.confirmed(id, time.Now())
			}
			progress = time.Now()
		case <-ticks:
			*seq++
			id := fmt.Sprintf("p%d-%d", p, *seq)
			s := &crashSent{ttl: *seq%2 == 1, at: time.Now()}
			queue := crashWork
			if s.ttl {
				queue = crashTTL
			}
			l.rec.published(id, s)
			ctx, cancel := context.WithTimeout(context.Background(), crashConfirmWait)
			err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{
				MessageId: id, DeliveryMode: amqp.Persistent, Body: []byte(id)})
			cancel()
			if err != nil {
				return err
			}
			pending = append(pending, id)
		case <-time.After(time.Until(progress.Add(crashConfirmWait))):
			if len(pending) > 0 {
				return fmt.Errorf("no confirm for %v", crashConfirmWait)
			}
			progress = time.Now()
		}
	}
}

func (l *crashLoad) consume(i int, queue string) {
	defer l.cons.Done()
	for attempt := i; l.cctx.Err() == nil; attempt++ {
		if err := l.consumeOn(attempt%len(l.c.Nodes), queue); err != nil {
			wait(l.cctx, 100*time.Millisecond)
		}
	}
}

func (l *crashLoad) consumeOn(ni int, queue string) error {
	n := l.c.Nodes[ni]
	conn, ch, err := crashDial(n)
	if err != nil {
		return err
	}
	defer conn.Close()
	return ConsumeAcking(l.cctx, ch, queue, crashPrefetch, func(d amqp.Delivery) {
		l.rec.received(d.MessageId, time.Now(), ni, d.Redelivered)
	})
}

// dumpCrash writes what the run saw to dir, for finding where lateness
// lies (RAFTMQ_CRASH_DUMP): rounds.csv (each fault, when it began and when
// every node it killed was ready again), messages.csv (each publish: sent,
// confirmed and first received, unix ms, 0 for never; the receiving
// consumer's node and the redelivered flag) and each node's log, whose
// "leading" lines give every term's barrier and clock wait.
func dumpCrash(t *testing.T, dir string, c *Cluster, rec *crashRecorder, rounds []crashRound) {
	ms := func(at time.Time) int64 {
		if at.IsZero() {
			return 0
		}
		return at.UnixMilli()
	}
	var b strings.Builder
	b.WriteString("round,fault,start_ms,back_ms\n")
	for i, r := range rounds {
		fmt.Fprintf(&b, "%d,%s,%d,%d\n", i, r.kind, ms(r.start), ms(r.back))
	}
	files := map[string]string{"rounds.csv": b.String()}
	b.Reset()
	b.WriteString("id,ttl,sent_ms,confirmed_ms,received_ms,node,redelivered\n")
	rec.mu.Lock()
	for id, s := range rec.sent {
		fmt.Fprintf(&b, "%s,%v,%d,%d,%d,%d,%v\n", id, s.ttl, ms(s.at), ms(s.confirmed), ms(rec.got[id]), rec.node[id], rec.redelivered[id])
	}
	rec.mu.Unlock()
	files["messages.csv"] = b.String()
	for _, n := range c.Nodes {
		data, err := os.ReadFile(n.LogPath)
		if err != nil {
			t.Logf("crash dump: %v", err)
			continue
		}
		files[n.ID+".log"] = string(data)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("crash dump: %v", err)
		return
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Logf("crash dump: %v", err)
		}
	}
}
