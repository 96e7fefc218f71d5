package fsm

import (
	"testing"

	"github.com/raftmq/raftmq/proto"
)

// BenchmarkShapeError is apply's check of a publish, on every replica.
func BenchmarkShapeError(b *testing.B) {
	c := &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q"}}}
	b.ReportAllocs()
	for b.Loop() {
		if shapeError(c) != nil {
			b.Fatal("refused")
		}
	}
}

func TestShapeError_HotKindsWithoutTheirMessage(t *testing.T) {
	for _, c := range []*proto.Command{{Cmd: &proto.Command_Publish{}}, {Cmd: &proto.Command_Settle{}}} {
		if r := shapeError(c); r.GetCode() != 541 {
			t.Fatalf("%v: %v, want 541", c, r)
		}
	}
	if r := shapeError(&proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{}}}); r != nil {
		t.Fatalf("a settle: %v", r)
	}
}
