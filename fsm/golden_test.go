package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/proto"
	pb "google.golang.org/protobuf/proto"
)

// The golden files hold a log and the snapshots and digests that the
// code of their commit made of it. A change that claims no change of
// behaviour must read them to the same state, digest and bytes; regenerate
// them (-update-golden) only with a change of behaviour, gated on a level.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden-* from the current code")

const (
	goldenLog   = "testdata/golden-log.bin"
	goldenSnaps = "testdata/golden-snapshots.bin"
	goldenSums  = "testdata/golden-digests.txt"
)

// goldenCheckpoints are the entry indexes after which a snapshot and the
// digest are kept: one per snapshot format the log passes through (7
// below level 6, 8 below level 8, 9 from there) and the end.
var goldenCheckpoints = []uint64{50, 230, 330, 480, 600}

// goldenLevels raise the log's level at these entries, so that the log
// crosses every gate of the codec and of apply.
var goldenLevels = map[uint64]uint32{60: 5, 100: 7, 250: Protocol}

// randomGoldenCommand mixes the property workloads with what they lack:
// delayed-retry queues, basic.reject and a picking exchange.
func randomGoldenCommand(r *rand.Rand, m *Machine) *proto.Command {
	// Retry queues are named by level: one declared below level 8 keeps
	// the returns of before.
	rq := "r" + strconv.Itoa(int(m.level)) + "-" + strconv.Itoa(r.Intn(2))
	switch k := r.Intn(100); {
	case k < 3:
		q := rq
		return &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: q, Arguments: &proto.Table{Fields: []*proto.Field{
			{Key: "x-delayed-retry-type", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte([]string{"all", "failed", "returned"}[r.Intn(3)])}}},
			{Key: "x-delayed-retry-min", Value: i64v(int64(1000 + r.Intn(500)))},
			{Key: "x-delayed-retry-max", Value: i64v(int64(3000 + r.Intn(1000)))},
			{Key: "x-delivery-limit", Value: i64v(int64(r.Intn(4)))}}}}}}
	case k < 8:
		ch := &proto.ChannelRef{Node: "n1", Connection: "c0", Channel: 1}
		switch r.Intn(3) {
		case 0:
			return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: rq, Body: []byte("b"), Channel: ch}}}
		case 1:
			return &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: rq, Prefetch: 2,
				Consumer: &proto.ConsumerRef{Channel: ch, Tag: "rt"}}}}
		}
		return &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ch, DeliveryTag: uint64(r.Intn(10)), Failed: r.Intn(2) == 0}}}
	case k < 10:
		return &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "hx", Type: ConsistentHashType}}}
	case k < 12:
		return &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "hx", Destination: "q" + strconv.Itoa(r.Intn(4)), RoutingKey: strconv.Itoa(1 + r.Intn(5))}}}
	case k < 16:
		return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "hx", RoutingKey: strconv.Itoa(r.Intn(1000)), Body: []byte("h")}}}
	case k < 40:
		return randomFeatureCommand(r)
	case k < 50:
		// Long delays, so that checkpoints find messages held.
		props := &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{
			{Key: "x-delay", Value: i64v(int64(2000 + r.Intn(20000)))},
			{Key: "k", Value: i64v(int64(r.Intn(3)))}}}}
		return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "dx", RoutingKey: "q" + strconv.Itoa(r.Intn(4)),
			Properties: props, Body: make([]byte, r.Intn(8))}}}
	}
	return randomDelayedCommand(r, m)
}

// makeGoldenLog builds the log: a vhost, then random entries.
func makeGoldenLog() []Entry {
	r := rand.New(rand.NewSource(33))
	m := New()
	var log []Entry
	add := func(e Entry) {
		m.Apply(e, DiscardSink{})
		log = append(log, e)
	}
	add(Entry{Index: 1, Envelope: &proto.Envelope{StampMs: 1000, Commands: []*proto.Command{
		{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dlx", Type: "fanout"}}},
	}}})
	now := int64(1000)
	last := goldenCheckpoints[len(goldenCheckpoints)-1]
	for i := uint64(2); i <= last; i++ {
		now += int64(r.Intn(40))
		var cmds []*proto.Command
		if l, ok := goldenLevels[i]; ok {
			cmds = append(cmds, &proto.Command{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: l}}})
		}
		if r.Intn(10) == 0 {
			cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Expire{Expire: &proto.Expire{Queues: m.DueExpiries(m.Clock())}}})
		}
		for n := 1 + r.Intn(3); n > 0; n-- {
			cmds = append(cmds, randomGoldenCommand(r, m))
		}
		add(Entry{Index: i, Envelope: &proto.Envelope{StampMs: now, Commands: cmds}})
	}
	return log
}

func appendChunk(b, chunk []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(chunk)))
	return append(b, chunk...)
}

func readChunks(t *testing.T, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			t.Fatal("damaged golden file")
		}
		out = append(out, b[k:k+int(n)])
		b = b[k+int(n):]
	}
	return out
}

func snapshotBytes(t *testing.T, m *Machine) []byte {
	t.Helper()
	w, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeGolden(t *testing.T) {
	log := makeGoldenLog()
	var lb, sb []byte
	var sums []string
	m := New()
	cp := 0
	for _, e := range log {
		b, err := pb.MarshalOptions{Deterministic: true}.Marshal(e.Envelope)
		if err != nil {
			t.Fatal(err)
		}
		lb = appendChunk(binary.AppendUvarint(lb, e.Index), b)
		m.Apply(e, DiscardSink{})
		if cp < len(goldenCheckpoints) && e.Index == goldenCheckpoints[cp] {
			sb = appendChunk(sb, snapshotBytes(t, m))
			d := m.Digest()
			sums = append(sums, hex.EncodeToString(d[:]))
			cp++
		}
	}
	for name, b := range map[string][]byte{goldenLog: lb, goldenSnaps: sb, goldenSums: []byte(strings.Join(sums, "\n") + "\n")} {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readGoldenLog(t *testing.T) []Entry {
	b, err := os.ReadFile(goldenLog)
	if err != nil {
		t.Fatal(err)
	}
	var log []Entry
	for len(b) > 0 {
		idx, k := binary.Uvarint(b)
		if k <= 0 {
			t.Fatal("damaged golden log")
		}
		b = b[k:]
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			t.Fatal("damaged golden log")
		}
		env := &proto.Envelope{}
		if err := pb.Unmarshal(b[k:k+int(n)], env); err != nil {
			t.Fatal(err)
		}
		b = b[k+int(n):]
		log = append(log, Entry{Index: idx, Envelope: env})
	}
	return log
}

// A log, and the snapshots and digests the code of an earlier commit made
// of it (testdata/golden-*): replaying the log gives the same digest and
// snapshot bytes at every checkpoint; each snapshot restores and encodes
// to the same bytes; and a replica restored from a checkpoint that applies
// the rest of the log ends where the replaying one ends.
func TestGolden_SameStateBytesAndDigests(t *testing.T) {
	if *updateGolden {
		writeGolden(t)
	}
	log := readGoldenLog(t)
	sb, err := os.ReadFile(goldenSnaps)
	if err != nil {
		t.Fatal(err)
	}
	snaps := readChunks(t, sb)
	sumText, err := os.ReadFile(goldenSums)
	if err != nil {
		t.Fatal(err)
	}
	sums := strings.Fields(string(sumText))
	if len(snaps) != len(goldenCheckpoints) || len(sums) != len(goldenCheckpoints) {
		t.Fatalf("%d snapshots and %d digests for %d checkpoints", len(snaps), len(sums), len(goldenCheckpoints))
	}
	m := New()
	restored := make([]*Machine, len(snaps))
	cp := 0
	for _, e := range log {
		m.Apply(e, DiscardSink{})
		for _, r := range restored[:cp] {
			r.Apply(e, DiscardSink{})
		}
		if cp == len(goldenCheckpoints) || e.Index != goldenCheckpoints[cp] {
			continue
		}
		d := m.Digest()
		if got := hex.EncodeToString(d[:]); got != sums[cp] {
			t.Fatalf("after entry %d the digest is %s, the golden one %s", e.Index, got, sums[cp])
		}
		if got := snapshotBytes(t, m); !bytes.Equal(got, snaps[cp]) {
			t.Fatalf("after entry %d the snapshot (%d bytes) differs from the golden one (%d bytes)", e.Index, len(got), len(snaps[cp]))
		}
		r := New()
		if err := r.RestoreBytes(snaps[cp]); err != nil {
			t.Fatalf("golden snapshot %d: %v", e.Index, err)
		}
		if got := snapshotBytes(t, r); !bytes.Equal(got, snaps[cp]) {
			t.Fatalf("golden snapshot %d restored encodes to other bytes", e.Index)
		}
		if r.Digest() != d {
			t.Fatalf("golden snapshot %d restored has another digest", e.Index)
		}
		restored[cp] = r
		t.Logf("entry %d: level %d, format %d, %d delayed held, %d retries waiting, %d unacked, %d bytes",
			e.Index, m.level, snaps[cp][4], m.delayed.held.Len(), len(m.retry.h), m.unackedCount(), len(snaps[cp]))
		cp++
	}
	if cp != len(goldenCheckpoints) {
		t.Fatalf("the golden log ends before checkpoint %d", goldenCheckpoints[cp])
	}
	want := m.Digest()
	for i, r := range restored {
		if r.Digest() != want {
			t.Fatalf("restored at entry %d and replayed to the end, the digest differs", goldenCheckpoints[i])
		}
	}
	// The log reaches what the gates guard: delayed and retried messages
	// waiting, unacked deliveries, queued messages.
	if m.delayed.seq == 0 || m.retry.seq == 0 || m.unackedCount() == 0 || m.stats.Routed == 0 {
		t.Fatalf("the golden log misses paths: %d delayed (seq %d), retry seq %d, %d unacked, %d routed",
			m.delayed.held.Len(), m.delayed.seq, m.retry.seq, m.unackedCount(), m.stats.Routed)
	}
}
