package group

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/bodies"
	"github.com/raftmq/raftmq/proto"
)

// The body store reads an entry the log cache holds from the cache, not
// from the log's files; before the node has its cache, from the store.
func TestBodyLogs_ReadThroughTheLogCache(t *testing.T) {
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	bl := &bodyLogs{LogStore: store}
	bs, err := bodies.Open(filepath.Join(t.TempDir(), "bodies"), bl, bodies.Options{CacheEntries: 1, CacheBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	cache := newLogCache(8, 1<<20, store)
	for i := uint64(1); i <= 3; i++ {
		data, err := gproto.Marshal(&proto.Envelope{Version: 1, Commands: []*proto.Command{
			{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: []byte{byte(i)}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cache.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(index uint64) {
		t.Helper()
		b, err := bs.Get(bodies.Key{Index: index})
		if err != nil || len(b) != 1 || b[0] != byte(index) {
			t.Fatalf("body of %d: %v %v", index, b, err)
		}
	}
	get(1)
	if store.reads != 1 {
		t.Fatalf("%d reads of the store without the cache, want 1", store.reads)
	}
	bl.cache.Store(cache)
	get(2)
	get(3)
	if store.reads != 1 {
		t.Fatalf("%d reads of the store with the cache, want none more", store.reads-1)
	}
}
