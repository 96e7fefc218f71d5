package amqp

import (
	"reflect"
	"testing"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/proto"
)

func TestConvert_TableRoundTripKeepsTypes(t *testing.T) {
	tab := wire.Table{
		{Key: "bool", Value: true},
		{Key: "int8", Value: int8(-8)},
		{Key: "uint8", Value: uint8(8)},
		{Key: "int16", Value: int16(-16)},
		{Key: "uint16", Value: uint16(16)},
		{Key: "int32", Value: int32(-32)},
		{Key: "uint32", Value: uint32(32)},
		{Key: "int64", Value: int64(-64)},
		{Key: "float32", Value: float32(1.5)},
		{Key: "float64", Value: 2.5},
		{Key: "decimal", Value: wire.Decimal{Scale: 3, Value: 12345}},
		{Key: "string", Value: "s"},
		{Key: "bytes", Value: []byte{1, 2}},
		{Key: "time", Value: time.Unix(1700000000, 0).UTC()},
		{Key: "table", Value: wire.Table{{Key: "x-death", Value: []any{wire.Table{{Key: "count", Value: int64(1)}}}}}},
		{Key: "empty", Value: wire.Table{}},
		{Key: "array", Value: []any{int32(1), "a", nil}},
		{Key: "void", Value: nil},
	}
	pt, err := tableToProto(tab)
	if err != nil {
		t.Fatal(err)
	}
	if k := pt.Fields[3].GetValue().GetKind(); reflect.TypeOf(k) != reflect.TypeOf(&proto.Value_Int16{}) {
		t.Fatalf("int16 kept as %T", k)
	}
	back := tableFromProto(pt)
	if !reflect.DeepEqual(back, tab) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", back, tab)
	}
	if _, err := tableToProto(wire.Table{{Key: "bad", Value: struct{}{}}}); err == nil {
		t.Fatal("an unsupported value converted")
	}
	if got := tableFromProto(&proto.Table{Fields: []*proto.Field{{Key: "s", Value: &proto.Value{Kind: &proto.Value_ShortString{ShortString: "x"}}}}}); got[0].Value != "x" {
		t.Fatalf("short string became %#v", got[0].Value)
	}
}

func TestConvert_PropertiesRoundTrip(t *testing.T) {
	all := wire.Properties{
		Flags: wire.FlagContentType | wire.FlagContentEncoding | wire.FlagHeaders | wire.FlagDeliveryMode |
			wire.FlagPriority | wire.FlagCorrelationID | wire.FlagReplyTo | wire.FlagExpiration |
			wire.FlagMessageID | wire.FlagTimestamp | wire.FlagType | wire.FlagUserID | wire.FlagAppID | wire.FlagClusterID,
		ContentType: "text/plain", ContentEncoding: "gzip", Headers: wire.Table{{Key: "h", Value: int32(1)}},
		DeliveryMode: 2, Priority: 5, CorrelationID: "c", ReplyTo: "r", Expiration: "100", MessageID: "m",
		Timestamp: time.Unix(1700000000, 0).UTC(), Type: "t", UserID: "u", AppID: "a", ClusterID: "k",
	}
	// Zero values that are present must stay present.
	zero := wire.Properties{Flags: wire.FlagPriority | wire.FlagExpiration | wire.FlagHeaders, Expiration: "0", Headers: wire.Table{}}
	for _, p := range []wire.Properties{all, zero, {}} {
		pp, err := propertiesToProto(&p)
		if err != nil {
			t.Fatal(err)
		}
		got := propertiesFromProto(pp)
		want := p
		if want.Flags&wire.FlagHeaders != 0 && len(want.Headers) == 0 {
			want.Headers = wire.Table{}
			got.Headers = normalizeEmpty(got.Headers)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, want)
		}
	}
}

func normalizeEmpty(t wire.Table) wire.Table {
	if t == nil {
		return wire.Table{}
	}
	return t
}

// BenchmarkPropertiesToProto is a persistent publish's properties (only
// delivery-mode set), converted once per publish.
func BenchmarkPropertiesToProto(b *testing.B) {
	p := &wire.Properties{Flags: wire.FlagDeliveryMode, DeliveryMode: 2}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := propertiesToProto(p); err != nil {
			b.Fatal(err)
		}
	}
}
