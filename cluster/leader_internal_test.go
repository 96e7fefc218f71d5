package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/clock"
	"github.com/raftmq/raftmq/cluster/membership"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

func discardLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 1}))
}

// startSingle starts a lone node on loopback.
func startSingle(t *testing.T) *Node {
	t.Helper()
	return startSingleWith(t, soloConfig(t.TempDir(), ""))
}

// startSingleWith starts a lone node with cfg and waits until it leads.
func startSingleWith(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for !n.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("a lone node did not become leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

func TestDueLoop_WakesEarlyAndBacksOff(t *testing.T) {
	n := startSingle(t)
	var (
		mu       sync.Mutex
		deadline = time.Now().Add(time.Hour).UnixMilli()
		nows     []int64
		clearDue = true // a proposal removes the due work
	)
	next := func(*fsm.Machine) (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		return deadline, true
	}
	propose := func(ctx context.Context, now int64) (bool, error) {
		mu.Lock()
		nows = append(nows, now)
		if clearDue {
			deadline = now + int64(time.Hour/time.Millisecond)
		}
		mu.Unlock()
		_, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
		return true, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.dueLoop(ctx, n.group, "test", next, propose)
	}()
	defer func() { cancel(); <-done }()
	proposals := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(nows)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		dl := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(dl) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}

	// The loop sleeps toward a deadline an hour away. An earlier deadline
	// appears, and an apply wakes the loop: it proposes on time.
	mu.Lock()
	want := time.Now().Add(40 * time.Millisecond).UnixMilli()
	deadline = want
	mu.Unlock()
	if _, err := n.Submit(context.Background(), &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}); err != nil {
		t.Fatal(err)
	}
	waitFor("the early deadline", func() bool { return proposals() == 1 })
	mu.Lock()
	got := nows[0]
	mu.Unlock()
	if got < want {
		t.Fatalf("proposed at %d, before the deadline %d", got, want)
	}
	if late := got - want; late > 1000 {
		t.Fatalf("proposed %d ms after the deadline", late)
	}

	// Work that stays due after its proposal is retried with backoff, not
	// in a busy loop.
	mu.Lock()
	clearDue = false
	deadline = time.Now().UnixMilli()
	mu.Unlock()
	if _, err := n.Submit(context.Background(), &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}); err != nil {
		t.Fatal(err)
	}
	waitFor("a retry", func() bool { return proposals() >= 3 })
	start, k0 := time.Now(), proposals()
	waitFor("more retries", func() bool { return proposals() >= k0+2 })
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("2 retries in %v: no backoff", el)
	}
}

// A duty judged byHead takes a burst due in one millisecond in many
// proposals without backing off, as long as each moves the head; a head
// its proposal left in place backs off.
func TestRunDue_ByHeadTakesABurstAndBacksOffAStuckHead(t *testing.T) {
	n := startSingle(t)
	const burst = 20
	var (
		mu    sync.Mutex
		due   = time.Now().UnixMilli() // one due time for the whole burst
		head  = uint64(1)
		nows  []int64
		moves = true // a proposal takes the head
	)
	next := func(*fsm.Machine) (int64, uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		return due, head, head <= burst
	}
	propose := func(ctx context.Context, now int64) (bool, error) {
		mu.Lock()
		nows = append(nows, now)
		if moves {
			head++
		}
		mu.Unlock()
		_, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
		return err == nil, err
	}
	proposals := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(nows)
	}
	waitFor := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		dl := time.Now().Add(within)
		for !cond() {
			if time.Now().After(dl) {
				t.Fatalf("timed out waiting for %s (%d proposals)", what, proposals())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.runDue(ctx, dueDuty{what: "test", log: n.group, next: next, propose: propose, progress: byHead})
	}()
	defer func() { cancel(); <-done }()

	// Backing off after each proposal of the burst would take a minute
	// (50 ms doubling to 5 s, 19 times).
	waitFor("the burst", 5*time.Second, func() bool { return proposals() == burst })

	// A head its proposal leaves in place is retried with backoff.
	mu.Lock()
	moves = false
	head = 1
	mu.Unlock()
	if _, err := n.Submit(context.Background(), &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}); err != nil {
		t.Fatal(err)
	}
	waitFor("a retry", 5*time.Second, func() bool { return proposals() >= burst+2 })
	start, k0 := time.Now(), proposals()
	waitFor("more retries", 5*time.Second, func() bool { return proposals() >= k0+2 })
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("2 retries in %v: no backoff", el)
	}
}

// A paced duty proposes work that fell due after its last proposal no
// sooner than the pace after it, in log time; work that was already due
// at the last proposal (a batch it had no room for) goes at once.
func TestRunDue_PacesWorkThatFallsDueAfterTheLastProposal(t *testing.T) {
	n := startSingle(t)
	var (
		mu     sync.Mutex
		nows   []int64
		head   = uint64(1)
		steady = true // the head falls due 1 ms after the last proposal
	)
	next := func(*fsm.Machine) (int64, uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if !steady || len(nows) == 0 {
			return 0, head, true // due long before any proposal
		}
		return nows[len(nows)-1] + 1, head, true
	}
	propose := func(ctx context.Context, now int64) (bool, error) {
		mu.Lock()
		nows = append(nows, now)
		head++
		mu.Unlock()
		_, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
		return err == nil, err
	}
	proposals := func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]int64(nil), nows...)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		dl := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(dl) {
				t.Fatalf("timed out waiting for %s (%d proposals)", what, len(proposals()))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	run := func(pace time.Duration) func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.runDue(ctx, dueDuty{what: "test", log: n.group, next: next, propose: propose, progress: byHead, pace: pace})
		}()
		return func() { cancel(); <-done }
	}

	// Work falling due steadily: one proposal a pace.
	const pace = 40 * time.Millisecond
	stop := run(pace)
	waitFor("five proposals", func() bool { return len(proposals()) >= 5 })
	stop()
	got := proposals()
	for i := 1; i < len(got); i++ {
		if gap := got[i] - got[i-1]; gap < pace.Milliseconds() {
			t.Fatalf("proposals at %v: %d ms apart, the pace is %v", got, gap, pace)
		}
	}

	// A backlog due before the last proposal is not paced: with a pace
	// of an hour, twenty proposals come only if it is not.
	mu.Lock()
	steady, nows = false, nil
	mu.Unlock()
	stop = run(time.Hour)
	waitFor("a backlog's twenty proposals", func() bool { return len(proposals()) >= 20 })
	stop()
}

func TestNode_SingleNodeRestartResumes(t *testing.T) {
	dir := t.TempDir()
	cfg := soloConfig(dir, "")
	cfg.SnapshotThreshold = 8
	cfg.TrailingLogs = 4
	cfg.SnapshotInterval = 50 * time.Millisecond
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Ready():
	default:
		t.Fatal("a new node must be ready at once")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last *proto.Result
	for range 40 {
		if last, err = n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}); err != nil {
			t.Fatal(err)
		}
	}
	for n.Stats().LastSnapshotIndex == 0 {
		if ctx.Err() != nil {
			t.Fatal("no snapshot was taken")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var clock int64
	n.View(func(m *fsm.Machine) { clock = m.Clock() })
	cfg.RaftAddr = n.RaftAddr()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n2, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	select {
	case <-n2.Ready():
	case <-ctx.Done():
		t.Fatal("the restarted node never became ready")
	}
	if got := n2.AppliedIndex(); got < last.GetIndex() {
		t.Fatalf("restarted node applied %d, had %d", got, last.GetIndex())
	}
	var nodeDown bool
	if err := n2.LogEntries(func(i uint64, env *proto.Envelope) bool {
		for _, c := range env.GetCommands() {
			nodeDown = nodeDown || c.GetNodeDown().GetNode() == "solo"
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !nodeDown {
		t.Fatal("the restarted node did not release its previous run")
	}
	// Log time survives the restart.
	var clock2 int64
	n2.View(func(m *fsm.Machine) { clock2 = m.Clock() })
	if clock2 < clock {
		t.Fatalf("log clock went back from %d to %d across the restart", clock, clock2)
	}
}

// Every proposal is forgotten once its entry is applied: a node that leads
// for long holds none of them.
func TestNode_ProposalsAreForgotten(t *testing.T) {
	n := startSingle(t)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if _, err := n.Submit(context.Background(), &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if k := n.group.Proposals().Len(); k != 0 {
		t.Fatalf("%d proposals held after every submission returned", k)
	}
}

// A command kind is proposed only once every server announces the
// protocol that introduced it; the other commands of the same batch go on.
func TestAdmit_ProtocolGate(t *testing.T) {
	n := startSingle(t)
	saved := commandProtocol.Load()
	t.Cleanup(func() { commandProtocol.Store(saved) })
	later := uint32(fsm.Protocol + 1)
	gate := func(c *proto.Command) uint32 {
		if c.GetTick() != nil {
			return later // as if Tick came in a later release
		}
		return fsm.CommandProtocol(c)
	}
	commandProtocol.Store(&gate)
	tick := &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
	vhost := &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "v"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.SubmitBatch(ctx, []*proto.Command{tick, vhost})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].GetCode() != 540 || !strings.Contains(res[0].GetText(), fmt.Sprintf("needs protocol version %d", later)) {
		t.Fatalf("tick on a cluster of an earlier protocol: %v", res[0])
	}
	if res[1].GetCode() != 0 || res[1].GetIndex() == 0 || res[0].GetIndex() != res[1].GetIndex() {
		t.Fatalf("the vhost put of the same batch: %v", res[1])
	}
	n.gossip.SetProtocol(later)
	res, err = n.SubmitBatch(ctx, []*proto.Command{tick})
	if err != nil || res[0].GetCode() != 0 {
		t.Fatalf("tick once every server announces %d: %v %v", later, res, err)
	}
}

func TestLowestProtocol(t *testing.T) {
	members := membership.NewTable()
	announce := func(id string, protocol uint32) {
		b, _ := gproto.Marshal(&proto.NodeMeta{Id: id, Protocol: protocol})
		members.Set(&memberlist.Node{Name: id, Meta: b}, HealthAlive)
	}
	servers := func(ids ...string) []raft.Server {
		var out []raft.Server
		for _, id := range ids {
			out = append(out, raft.Server{ID: raft.ServerID(id)})
		}
		return out
	}
	announce("a", 3)
	announce("b", 2)
	announce("old", 0) // a version from before the announcement
	// A server gossip has not shown yet counts as the log's level: it
	// applies the log.
	for _, tc := range []struct {
		servers []raft.Server
		own     uint32
		level   uint32
		want    uint32
	}{
		{servers("me"), 3, 1, 3},
		{servers("me", "a"), 3, 1, 3},
		{servers("me", "a", "b"), 3, 1, 2},
		{servers("me", "a"), 2, 1, 2},
		{servers("me", "a", "old"), 3, 1, 1},
		{servers("me", "a", "old"), 3, 3, 1},
		{servers("me", "a", "unseen"), 3, 0, 1},
		{servers("me", "a", "unseen"), 3, 1, 1},
		{servers("me", "a", "unseen"), 3, 2, 2},
		{servers("me", "a", "unseen", "later"), 3, 3, 3},
		{servers("me", "a", "b", "unseen"), 3, 3, 2},
	} {
		asked := 0
		level := func() uint32 { asked++; return tc.level }
		if got := lowestProtocol(tc.servers, "me", tc.own, members, level); got != tc.want {
			t.Errorf("servers %v, own %d, log level %d: %d, want %d", tc.servers, tc.own, tc.level, got, tc.want)
		}
		if asked > 1 {
			t.Errorf("servers %v: the log's level read %d times", tc.servers, asked)
		}
	}
}

// The reconcile loop sleeps until the first server's time to be declared
// down is up, however soon, but waits at most half of NodeDownAfter (or
// the reconcile interval) for what a round retries, and at most an eighth
// of it while rounds are to come soon or a declaration is past due.
func TestReconcileAfter_UntilTheFirstServerIsDueWithinBounds(t *testing.T) {
	const down, interval = 1500 * time.Millisecond, 5 * time.Second
	for _, c := range []struct {
		due, interval time.Duration
		soon          bool
		want          time.Duration
	}{
		{400 * time.Millisecond, interval, false, 400 * time.Millisecond}, // a server silent for 1.1 s
		{1400 * time.Millisecond, interval, false, down / 2},              // every server just heard from
		{20 * time.Millisecond, interval, false, 20 * time.Millisecond},   // due in less than an eighth: on time
		{20 * time.Millisecond, interval, true, 20 * time.Millisecond},    // also while busy
		{400 * time.Millisecond, interval, true, down / 8},                // busy: the next round soon
		{-time.Second, interval, false, down / 8},                         // a declaration that failed: tried again
		{0, interval, false, down / 8},
		{time.Microsecond, interval, false, time.Millisecond},
		{400 * time.Millisecond, 100 * time.Millisecond, false, 100 * time.Millisecond},
		{400 * time.Millisecond, 100 * time.Millisecond, true, 100 * time.Millisecond},
	} {
		if got := reconcileAfter(c.due, down, c.interval, c.soon); got != c.want {
			t.Errorf("reconcileAfter(%v, %v, %v, %v) = %v, want %v", c.due, down, c.interval, c.soon, got, c.want)
		}
	}
}

// stillClock is a clock that stands still: its timers of any length
// never fire, as a test's fake clock between two of its steps.
type stillClock struct{ now time.Time }

func (c stillClock) Now() time.Time                       { return c.now }
func (stillClock) Monotonic() time.Duration               { return time.Hour }
func (c stillClock) NewTimer(d time.Duration) clock.Timer { return stillTimer{c.now, d} }

type stillTimer struct {
	now time.Time
	d   time.Duration
}

func (t stillTimer) C() <-chan time.Time {
	if t.d <= 0 {
		ch := make(chan time.Time, 1)
		ch <- t.now
		return ch
	}
	return nil
}
func (stillTimer) Stop() bool { return true }

// A duty whose proposal failed goes again after its backoff even while
// the node's clock stands still: the backoff paces retries in real time.
// A test's fake clock moves only between its steps, and a backoff on it
// holds a delayed release that is already due until the test moves the
// clock, which a test waiting for the release never does.
func TestRunDue_AFailedProposalGoesAgainWhileTheClockStandsStill(t *testing.T) {
	cfg := soloConfig(t.TempDir(), "")
	cfg.Clock = stillClock{now: time.Now()}
	n := startSingleWith(t, cfg)
	for _, progress := range []dueProgress{byHead, byDeadline} {
		var (
			mu    sync.Mutex
			tries int
			done  bool
		)
		next := func(*fsm.Machine) (int64, uint64, bool) {
			mu.Lock()
			defer mu.Unlock()
			return n.clocks.Stamper().Peek(), 1, !done
		}
		propose := func(ctx context.Context, now int64) (bool, error) {
			mu.Lock()
			tries++
			first := tries == 1
			mu.Unlock()
			if first {
				return false, errors.New("a transient failure")
			}
			_, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
			mu.Lock()
			done = err == nil
			mu.Unlock()
			return err == nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			n.runDue(ctx, dueDuty{what: "test", log: n.group, next: next, propose: propose, progress: progress})
		}()
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			ok, k := done, tries
			mu.Unlock()
			if ok {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				<-stopped
				t.Fatalf("progress %d: %d proposals in 5 s, none after the failed one", progress, k)
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		<-stopped
	}
}
