package amqp

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/proto"
)

// A publish's short strings, properties and header keys are any bytes:
// converted to its log command, marshalled as a follower forwards it to
// the leader, and converted back, it encodes to the same content header
// and method as the client sent.
func FuzzConvertShortStringsRoundTrip(f *testing.F) {
	f.Add("amq.direct", "rk", "id", "x-key")
	f.Add("ex\xff", "r\x00k", "\xc3(", "h\xfe\xfe")
	f.Add("", "", "", "")
	f.Add("ключ", "\xed\xa0\x80", "键", strings.Repeat("\xff", 255))
	codec := encoding.GetCodecV2(grpcproto.Name)
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		clip := func(s string) string { return s[:min(len(s), 255)] }
		a, b, c = clip(a), clip(b), clip(c)
		props := &wire.Properties{
			Flags: wire.FlagContentType | wire.FlagContentEncoding | wire.FlagHeaders | wire.FlagCorrelationID |
				wire.FlagReplyTo | wire.FlagExpiration | wire.FlagMessageID | wire.FlagType | wire.FlagUserID |
				wire.FlagAppID | wire.FlagClusterID,
			ContentType: a, ContentEncoding: b, CorrelationID: c, ReplyTo: a, Expiration: b,
			MessageID: a, Type: b, UserID: c, AppID: a, ClusterID: c,
			Headers: wire.Table{
				{Key: c, Value: d},
				{Key: a, Value: wire.Table{{Key: b, Value: []any{d, []byte(c)}}}},
			},
		}
		pp, err := propertiesToProto(props)
		if err != nil {
			t.Fatal(err)
		}
		req := &proto.ForwardRequest{Id: 1, Commands: []*proto.Command{{Cmd: &proto.Command_Publish{Publish: &proto.Publish{
			Vhost: "/", Exchange: a, RoutingKey: b, Properties: pp, Body: []byte(d),
		}}}}}
		data, err := codec.Marshal(req)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back := &proto.ForwardRequest{}
		if err := codec.Unmarshal(data, back); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		pub := back.GetCommands()[0].GetPublish()
		m := &wire.BasicPublish{Exchange: a, RoutingKey: b}
		got := &wire.BasicPublish{Exchange: pub.GetExchange(), RoutingKey: pub.GetRoutingKey()}
		if !bytes.Equal(got.AppendTo(nil), m.AppendTo(nil)) {
			t.Fatalf("basic.publish changed: %q %q, want %q %q", got.Exchange, got.RoutingKey, a, b)
		}
		gp := propertiesFromProto(pub.GetProperties())
		want := (&wire.ContentHeader{ClassID: wire.ClassBasic, Properties: *props}).AppendTo(nil)
		if h := (&wire.ContentHeader{ClassID: wire.ClassBasic, Properties: gp}).AppendTo(nil); !bytes.Equal(h, want) {
			t.Fatalf("properties changed:\n got %#v\nwant %#v", gp, *props)
		}
	})
}
