package groupcost

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"

	rgroup "github.com/raftmq/raftmq/cluster/group"
)

// nodes is the cluster size every benchmark runs: three, the size of a
// queue group.
const nodes = 3

// counter is the state machine: it counts what it applies, so that the
// figures are raft's and the log's, not a broker's.
type counter struct {
	n       atomic.Uint64
	applied *rgroup.AppliedIndex // for QuietAppends, when set
}

func (c *counter) Apply(l *raft.Log) any {
	c.n.Add(1)
	if c.applied != nil {
		c.applied.Advance(l.Index)
	}
	return nil
}
func (c *counter) Snapshot() (raft.FSMSnapshot, error) {
	return snap{}, nil
}
func (c *counter) Restore(r io.ReadCloser) error { return r.Close() }

type snap struct{}

func (snap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (snap) Release()                          {}

// countingLogs counts the appends raft makes: raft-wal syncs each one,
// so this is the group's fsyncs.
type countingLogs struct {
	*raftwal.WAL
	appends *atomic.Uint64
	quiet   *rgroup.QuietAppends // told of every append, when set
}

func (l countingLogs) StoreLogs(logs []*raft.Log) error {
	l.appends.Add(1)
	err := l.WAL.StoreLogs(logs)
	if l.quiet != nil {
		l.quiet.Wake()
	}
	return err
}

func (l countingLogs) StoreLog(log *raft.Log) error {
	return l.StoreLogs([]*raft.Log{log})
}

// group is one Raft group: a member on each node.
type group struct {
	rafts  [nodes]*raft.Raft
	trans  [nodes]*raft.NetworkTransport
	wals   [nodes]*raftwal.WAL
	fsms   [nodes]*counter
	quiet  [nodes]*rgroup.QuietAppends
	leader atomic.Pointer[raft.Raft]
}

// fleet is every group of a run, and each node's log appends.
type fleet struct {
	groups  []*group
	muxes   []*rgroup.Mux
	appends [nodes]atomic.Uint64
}

// config is raftmq's raft configuration (cluster.Config's defaults):
// the commit timeout is what an idle leader waits before it sends its
// followers an append again, so it is a parameter of the cost.
func config(id int, commit time.Duration) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(fmt.Sprintf("n%d", id))
	c.HeartbeatTimeout = time.Second
	c.ElectionTimeout = time.Second
	c.LeaderLeaseTimeout = 500 * time.Millisecond
	c.CommitTimeout = commit
	c.BatchApplyCh = true
	c.MaxAppendEntries = 256
	c.SnapshotThreshold = 1 << 40
	c.Logger = hclog.NewNullLogger()
	return c
}

// tcpLayer is a plain TCP raft stream layer: a node's one listener when
// its groups share it through a mux.
type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

// start runs groups of three members. With quiet, raft's transport is
// raftmq's (no pipeline, idle repeats answered by rgroup.QuietAppends).
// Without mux each member has a TCP
// listener of its own; with it each node has one, shared by its groups
// through a group.Mux.
func start(tb testing.TB, groups int, commit time.Duration, mux, quiet bool) *fleet {
	tb.Helper()
	dir := tb.TempDir()
	f := &fleet{}
	var muxes [nodes]*rgroup.Mux
	if mux {
		for n := range nodes {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				tb.Fatal(err)
			}
			muxes[n] = rgroup.NewMux(tcpLayer{ln}, rgroup.MuxConfig{})
			f.muxes = append(f.muxes, muxes[n])
		}
	}
	for g := range groups {
		gr := &group{}
		var servers []raft.Server
		for n := range nodes {
			var addr string
			if mux {
				l, err := muxes[n].Layer(fmt.Sprintf("g%d", g))
				if err != nil {
					tb.Fatal(err)
				}
				addr = l.Addr().String()
				gr.trans[n] = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: l, MaxPool: 3,
					Timeout: 10 * time.Second, Logger: hclog.NewNullLogger()})
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					tb.Fatal(err)
				}
				_ = ln.Close()
				addr = ln.Addr().String()
				tr, err := raft.NewTCPTransportWithLogger(addr, nil, 3, 10*time.Second, hclog.NewNullLogger())
				if err != nil {
					tb.Fatal(err)
				}
				gr.trans[n] = tr
			}
			servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", n)), Address: raft.ServerAddress(addr)})
		}
		for n := range nodes {
			wdir := filepath.Join(dir, fmt.Sprintf("g%d-n%d", g, n))
			if err := os.MkdirAll(wdir, 0o755); err != nil {
				tb.Fatal(err)
			}
			w, err := raftwal.Open(wdir)
			if err != nil {
				tb.Fatal(err)
			}
			gr.wals[n] = w
			gr.fsms[n] = &counter{}
			logs := countingLogs{WAL: w, appends: &f.appends[n]}
			var tr raft.Transport = gr.trans[n]
			if quiet {
				// As a raftmq group's: the window is HeartbeatTimeout/5.
				gr.fsms[n].applied = rgroup.NewAppliedIndex()
				logs.quiet = rgroup.NewQuietAppends(time.Second / 5)
				logs.quiet.AnswerHeartbeats() // as a queue group's
				logs.quiet.Applied(gr.fsms[n].applied.Load)
				tr = rgroup.NoPipeline{NetworkTransport: gr.trans[n], Quiet: logs.quiet}
				gr.quiet[n] = logs.quiet
			}
			r, err := raft.NewRaft(config(n, commit), gr.fsms[n], logs, w, raft.NewInmemSnapshotStore(), tr)
			if err != nil {
				tb.Fatal(err)
			}
			gr.rafts[n] = r
		}
		// Leaders are spread as queue groups would spread them: group g
		// is bootstrapped by node g mod 3, which then nearly always wins.
		boot := gr.rafts[g%nodes]
		if err := boot.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			tb.Fatal(err)
		}
		f.groups = append(f.groups, gr)
	}
	tb.Cleanup(f.stop)
	deadline := time.Now().Add(time.Duration(10+groups/4) * time.Second)
	for _, gr := range f.groups {
		for gr.leaderNow() == nil {
			if time.Now().After(deadline) {
				tb.Fatalf("a group elected no leader within the deadline")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return f
}

func (g *group) leaderNow() *raft.Raft {
	for _, r := range g.rafts {
		if r.State() == raft.Leader {
			g.leader.Store(r)
			return r
		}
	}
	return nil
}

func (f *fleet) stop() {
	var wg sync.WaitGroup
	for _, g := range f.groups {
		for n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.quiet[n].Close()
				_ = g.rafts[n].Shutdown().Error()
				_ = g.trans[n].Close()
				_ = g.wals[n].Close()
			}()
		}
	}
	wg.Wait()
	for _, m := range f.muxes {
		_ = m.Close()
	}
}

// cpu is the process's user and system CPU time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var sizes = []int{1, 16, 64}

// BenchmarkIdleGroups measures what idle groups cost each node: nothing
// is proposed, so what remains is raft's heartbeats and the leader's
// commit-timeout appends. Every iteration is one idle window of 5 s.
// With mux=true each node's groups share one listener (rgroup.Mux), as a
// node of queue groups does.
func BenchmarkIdleGroups(b *testing.B) {
	for _, mux := range []bool{false, true} {
		for _, commit := range []time.Duration{2 * time.Millisecond, 50 * time.Millisecond} {
			for _, groups := range sizes {
				b.Run(fmt.Sprintf("mux=%t/commit=%s/groups=%d", mux, commit, groups), func(b *testing.B) {
					idle(b, groups, commit, mux, false)
				})
			}
		}
	}
	// raftmq's groups: the mux, the 2 ms commit timeout, and the idle
	// repeats answered without being sent.
	for _, groups := range sizes {
		b.Run(fmt.Sprintf("quiet/commit=2ms/groups=%d", groups), func(b *testing.B) {
			idle(b, groups, 2*time.Millisecond, true, true)
		})
	}
}

// idle is one run of BenchmarkIdleGroups.
func idle(b *testing.B, groups int, commit time.Duration, mux, quiet bool) {
	before := runtime.NumGoroutine()
	f := start(b, groups, commit, mux, quiet)
	time.Sleep(2 * time.Second) // let elections and their first appends settle
	goroutines := runtime.NumGoroutine() - before
	const window = 5 * time.Second
	var used time.Duration
	b.ResetTimer()
	for range b.N {
		c0 := cpu()
		time.Sleep(window)
		used += cpu() - c0
	}
	b.StopTimer()
	perNode := float64(used) / float64(b.N) / float64(window) / nodes * 100
	b.ReportMetric(perNode, "cpu%/node")
	b.ReportMetric(float64(goroutines)/nodes, "goroutines/node")
	_ = f
}

// BenchmarkGroupsUnderLoad spreads the same 64 writers over 1, 16 or 64
// groups, each writer proposing 1 KiB commands one after the other to its
// group's leader for 5 s an iteration, and reports what each node
// committed and how many log appends (fsyncs) that took.
func BenchmarkGroupsUnderLoad(b *testing.B) {
	const writers = 64
	payload := make([]byte, 1024)
	for _, groups := range sizes {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			f := start(b, groups, 2*time.Millisecond, false, false)
			const window = 5 * time.Second
			var entries, appends uint64
			var used time.Duration
			b.ResetTimer()
			for range b.N {
				a0 := f.appends[0].Load() + f.appends[1].Load() + f.appends[2].Load()
				c0 := cpu()
				var done atomic.Uint64
				end := time.Now().Add(window)
				var wg sync.WaitGroup
				for w := range writers {
					g := f.groups[w%groups]
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(end) {
							r := g.leader.Load()
							if r.Apply(payload, 5*time.Second).Error() == nil {
								done.Add(1)
							} else if l := g.leaderNow(); l == nil {
								time.Sleep(10 * time.Millisecond)
							}
						}
					}()
				}
				wg.Wait()
				used += cpu() - c0
				entries += done.Load()
				appends += f.appends[0].Load() + f.appends[1].Load() + f.appends[2].Load() - a0
			}
			b.StopTimer()
			secs := float64(b.N) * window.Seconds()
			b.ReportMetric(float64(entries)/secs, "entries/s")
			b.ReportMetric(float64(appends)/secs/nodes, "fsyncs/s/node")
			b.ReportMetric(float64(used)/float64(b.N)/float64(window)/nodes*100, "cpu%/node")
		})
	}
}
