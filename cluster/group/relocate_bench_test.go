package group

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/bodies"
	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

// BenchmarkRelocation_LogAppends measures what the log's appends (each
// an fsync, what every commit waits on) take while a snapshot relocates
// 64 MiB of waiting bodies: all in the snapshot (at-once, as before the
// relocation was paced) or one step there and the rest paced (paced).
// append-p99-ms and append-max-ms are the appends' latency during the
// relocation; reloc-s is how long it took.
//
//	go test ./cluster/group -run '^$' -bench Relocation_LogAppends -benchtime 1x -count 3
func BenchmarkRelocation_LogAppends(b *testing.B) {
	for _, mode := range []string{"at-once", "paced"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				n := openRelocBenchNode(b)
				live, to := n.benchFill(b, 64<<10, 1024)
				b.StartTimer()
				var (
					mu   sync.Mutex
					lat  []time.Duration
					stop = make(chan struct{})
					done = make(chan struct{})
				)
				go func() {
					defer close(done)
					data := make([]byte, 1024)
					for {
						select {
						case <-stop:
							return
						default:
						}
						last, _ := n.logs.LastIndex()
						t := time.Now()
						if err := n.logs.StoreLogs([]*raft.Log{{Index: last + 1, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
							panic(err)
						}
						mu.Lock()
						lat = append(lat, time.Since(t))
						mu.Unlock()
						time.Sleep(time.Millisecond)
					}
				}()
				start := time.Now()
				if mode == "at-once" {
					if err := n.store.Retain(live, to); err != nil {
						b.Fatal(err)
					}
				} else {
					n.f.paceHook = nil
					n.f.retain(live, to, to)
					n.waitIdle()
				}
				reloc := time.Since(start)
				close(stop)
				<-done
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "append-p99-ms")
				b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "append-max-ms")
				b.ReportMetric(reloc.Seconds(), "reloc-s")
			}
		})
	}
}

func openRelocBenchNode(b *testing.B) *relocNode {
	dir := b.TempDir()
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		b.Fatal(err)
	}
	store, err := bodies.Open(dir+"/bodies", st.Entries(), bodies.Options{})
	if err != nil {
		b.Fatal(err)
	}
	n := &relocNode{st: st, store: store, logs: st.Logs(store.Pin), closing: make(chan struct{})}
	n.f = NewFSM(FSMConfig{NodeID: "me", Logger: discardLogger(), State: NewState(), Applied: NewAppliedIndex(),
		Proposals: &Proposals{}, Storage: st, Bodies: store, TrailingLogs: 0, Closing: n.closing})
	n.f.reloc.idle = sync.NewCond(&n.f.reloc.mu)
	b.Cleanup(n.close)
	return n
}

// benchFill appends count entries of one body of size each straight to
// the log (no state) and returns them as the live list of a snapshot.
func (n *relocNode) benchFill(b *testing.B, size, count int) ([]bodies.Live, uint64) {
	ch := &proto.ChannelRef{Node: "me", Connection: "c1", Channel: 1}
	body := make([]byte, size)
	var live []bodies.Live
	var last uint64
	for i := range count {
		data, err := gproto.Marshal(&proto.Envelope{Version: 1, Commands: []*proto.Command{{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: body, Channel: ch}}}}})
		if err != nil {
			b.Fatal(err)
		}
		l := &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}
		if err := n.logs.StoreLogs([]*raft.Log{l}); err != nil {
			b.Fatal(err)
		}
		live = append(live, bodies.Live{Index: l.Index, Size: uint32(size)})
		last = l.Index
	}
	return live, last
}
