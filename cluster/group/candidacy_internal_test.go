package group

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// slowVotes is an in-memory transport whose vote and pre-vote requests
// are answered only after delay, as on a node starved of CPU.
type slowVotes struct {
	rpcsTransport
	delay time.Duration
}

func (t slowVotes) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	time.Sleep(t.delay)
	return t.rpcsTransport.RequestVote(id, target, args, resp)
}

func (t slowVotes) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	time.Sleep(t.delay)
	return t.rpcsTransport.RequestPreVote(id, target, args, resp)
}

// Votes that come back after the short candidacy timeout (the lease) but
// within the configured election timeout still elect a leader: the
// candidates go back to the configured timeouts once the short ones have
// failed a few times. With the short ones alone, every candidacy ended
// before its answers were counted, and no group of three ever led.
func TestCandidacy_VotesSlowerThanTheLeaseStillElect(t *testing.T) {
	timings := RaftTimings{HeartbeatTimeout: 400 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond,
		LeaderLeaseTimeout: 40 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		SnapshotThreshold: 8192, SnapshotInterval: time.Minute, TrailingLogs: 1024}
	// A short candidacy lasts 40 to 80 ms; the votes take 150 ms, and
	// the configured election waits 400 to 800 ms.
	const delay = 150 * time.Millisecond
	groups := inmemGroups(t, timings, func(tr raft.Transport) raft.Transport {
		return slowVotes{tr.(rpcsTransport), delay}
	})
	awaitLeader(t, groups)
}

// inmemGroups starts three groups of one raft group on in-memory
// transports, wrap (nil: none) around each member's, and shuts them down
// when the test ends.
func inmemGroups(t *testing.T, timings RaftTimings, wrap func(raft.Transport) raft.Transport) []*Group {
	t.Helper()
	closing := make(chan struct{})
	ids := []raft.ServerID{"n1", "n2", "n3"}
	var cfg raft.Configuration
	trans := make([]*raft.InmemTransport, len(ids))
	for i, id := range ids {
		var addr raft.ServerAddress
		addr, trans[i] = raft.NewInmemTransport(raft.ServerAddress(id))
		cfg.Servers = append(cfg.Servers, raft.Server{ID: id, Address: addr})
	}
	for i := range trans {
		for j := range trans {
			if i != j {
				trans[i].Connect(trans[j].LocalAddr(), trans[j])
			}
		}
	}
	var groups []*Group
	t.Cleanup(func() {
		close(closing)
		for _, g := range groups {
			_ = g.Shutdown().Error()
			g.Close()
		}
	})
	for i, id := range ids {
		g, err := Open(Config{ID: string(id), Dir: filepath.Join(t.TempDir(), string(id)), Logger: discardLogger(),
			Raft: timings, FSM: FSMConfig{NodeID: string(id)}, Closing: closing})
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
		tr := trans[i]
		if _, err := g.Start(tr.Consumer(), func(rpcs <-chan raft.RPC) raft.Transport {
			var rt raft.Transport = rpcsTransport{tr, rpcs}
			if wrap != nil {
				rt = wrap(rt)
			}
			return rt
		}, closing); err != nil {
			t.Fatal(err)
		}
		if err := g.Raft().BootstrapCluster(cfg).Error(); err != nil {
			t.Fatal(err)
		}
	}
	return groups
}

// awaitLeader returns the member of groups that leads, failing the test
// when none does within 20 s. It looks again at each change of a
// member's raft state (Observe), registered before the first look so
// that no change in between is missed.
func awaitLeader(t *testing.T, groups []*Group) *Group {
	t.Helper()
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	defer close(done)
	for _, g := range groups {
		obs, stop := Observe[raft.RaftState](g.Raft(), 4)
		defer stop()
		go func() {
			for {
				select {
				case <-obs:
					select {
					case changed <- struct{}{}:
					default:
					}
				case <-done:
					return
				}
			}
		}()
	}
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		for _, g := range groups {
			if g.Raft().State() == raft.Leader {
				return g
			}
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatal("no member led within 20 s")
		}
	}
}
