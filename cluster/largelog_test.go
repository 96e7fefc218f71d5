package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft-wal/segment"

	"github.com/raftmq/raftmq/proto"
)

// walFiles are the files of the write-ahead log in dataDir that keep
// says yes to.
func walFiles(t *testing.T, dataDir string, keep func(name string, size int64) bool) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if keep(e.Name(), info.Size()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// sideFiles are the entries the write-ahead log in dataDir keeps beside
// it.
func sideFiles(t *testing.T, dataDir string) []string {
	return walFiles(t, dataDir, func(name string, _ int64) bool { return strings.HasSuffix(name, ".entry") })
}

// A node whose log holds an entry over raft-wal's limit, written as
// releases before side files wrote it (the log itself, by raft-wal),
// starts and serves the message.
func TestNode_StartsOnALogWrittenWithAnOversizedEntry(t *testing.T) {
	dir := t.TempDir()
	const size = segment.MaxEntrySize + 6<<20 // raft-wal writes it, and refuses to read it back
	body := bytes.Repeat([]byte("raftmq body "), size/12+1)[:size]
	cfg := soloConfig(dir, LogStoreWAL)
	cfg.MaxMessageSize = size

	cfg.inlineMax = 1 << 62
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	<-n.Ready()
	for _, c := range []*proto.Command{
		{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Durable: true}}},
		{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: body, Properties: &proto.Properties{}}}},
	} {
		if res, err := n.Submit(ctx, c); err != nil || res.GetCode() != 0 {
			t.Fatalf("submit: %v, %v", res, err)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.inlineMax = 0

	// The fixture is the bug: raft-wal refuses one of its entries. It
	// preallocates segments to 64 MiB: only one grown past that holds a
	// record over its limit.
	if n := len(walFiles(t, dir, func(name string, size int64) bool { return strings.HasSuffix(name, ".wal") && size > 64<<20 })); n != 1 {
		t.Fatalf("%d segments grown past 64 MiB; want one", n)
	}
	if n := len(sideFiles(t, dir)); n != 0 {
		t.Fatalf("%d side files in the old release's log", n)
	}

	n, err = Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	select {
	case <-n.Ready():
	case <-ctx.Done():
		t.Fatal("not ready after the migration")
	}
	ch := &proto.ChannelRef{Node: "solo", Connection: "c", Channel: 1}
	res, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{Vhost: "/", Queue: "q", NoAck: true, Channel: ch}}})
	if err != nil || res.GetCode() != 0 {
		t.Fatalf("get: %v, %v", res, err)
	}
	if got := res.GetGet().GetBody(); !bytes.Equal(got, body) {
		t.Fatalf("got %d bytes back, want the %d published", len(got), len(body))
	}
	if n := len(sideFiles(t, dir)); n != 1 {
		t.Fatalf("%d side files after the migration, want 1", n)
	}
}
