package wire

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"reflect"
	"testing"
	"time"
)

// Frames amqp091-go v1.16.0 sent to a test listener: dial, channel, a
// queue.declare with arguments and a mandatory publish with properties.
var goldenFrames = []struct {
	name string
	hex  string
	want any
}{
	{"connection.start-ok", "010000000000a7000a000b000000830770726f647563745300000006676f6c64656e0776657273696f6e5300000001310c6361706162696c6974696573460000005012636f6e6e656374696f6e2e626c6f636b6564740116636f6e73756d65725f63616e63656c5f6e6f7469667974010a62617369632e6e61636b7401127075626c69736865725f636f6e6669726d73740105504c41494e0000000c00677565737400677565737405656e5f5553ce",
		&ConnectionStartOk{
			ClientProperties: Table{
				{"product", "golden"}, {"version", "1"},
				{"capabilities", Table{{"connection.blocked", true}, {"consumer_cancel_notify", true}, {"basic.nack", true}, {"publisher_confirms", true}}},
			},
			Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US",
		}},
	{"connection.tune-ok", "0100000000000c000a001f07ff00020000000ace", &ConnectionTuneOk{ChannelMax: 2047, FrameMax: 131072, Heartbeat: 10}},
	{"connection.open", "01000000000008000a0028012f0000ce", &ConnectionOpen{VirtualHost: "/"}},
	{"channel.open", "010001000000050014000a00ce", &ChannelOpen{}},
	{"queue.declare", "0100010000003d0032000a000006676f6c64656e020000002b0d782d6d6573736167652d74746c490000ea600c782d71756575652d74797065530000000671756f72756dce",
		&QueueDeclare{Queue: "golden", Durable: true, Arguments: Table{{"x-message-ttl", int32(60000)}, {"x-queue-type", "quorum"}}}},
	{"basic.publish", "0100010000000f003c002800000006676f6c64656e01ce", &BasicPublish{RoutingKey: "golden", Mandatory: true}},
	{"content header", "02000100000051003c00000000000000000005b9c00a746578742f706c61696e000000220168530000000176016e6c00000000000000070166643ff80000000000000162740102030435303030026d31000000006553f100ce",
		&ContentHeader{ClassID: ClassBasic, BodySize: 5, Properties: Properties{
			Flags:       FlagContentType | FlagHeaders | FlagDeliveryMode | FlagPriority | FlagExpiration | FlagMessageID | FlagTimestamp,
			ContentType: "text/plain", Headers: Table{{"h", "v"}, {"n", int64(7)}, {"f", 1.5}, {"b", true}},
			DeliveryMode: 2, Priority: 3, Expiration: "5000", MessageID: "m1", Timestamp: time.Unix(1700000000, 0).UTC(),
		}}},
	{"body", "0300010000000568656c6c6fce", []byte("hello")},
	{"channel.close", "0100010000000b0014002800c80000000000ce", &ChannelClose{ReplyCode: 200}},
	{"connection.close", "01000000000012000a003200c8076b74687862616900000000ce", &ConnectionClose{ReplyCode: 200, ReplyText: "kthxbai"}},
}

func TestGolden_AMQP091Go(t *testing.T) {
	for _, g := range goldenFrames {
		raw, err := hex.DecodeString(g.hex)
		if err != nil {
			t.Fatal(err)
		}
		f, err := ReadFrame(bufio.NewReader(bytes.NewReader(raw)), 131072)
		if err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		var got any
		var again []byte
		switch f.Type {
		case FrameMethod:
			m, err := DecodeMethod(f.Payload)
			if err != nil {
				t.Fatalf("%s: %v", g.name, err)
			}
			got, again = m, AppendMethodFrame(nil, f.Channel, m)
		case FrameHeader:
			h, err := DecodeContentHeader(f.Payload)
			if err != nil {
				t.Fatalf("%s: %v", g.name, err)
			}
			got, again = h, AppendHeaderFrame(nil, f.Channel, h)
		default:
			got, again = f.Payload, AppendFrame(nil, f.Type, f.Channel, f.Payload)
		}
		if !reflect.DeepEqual(got, g.want) {
			t.Errorf("%s:\n got %#v\nwant %#v", g.name, got, g.want)
		}
		// Our encoder writes exactly what amqp091-go wrote.
		if !bytes.Equal(again, raw) {
			t.Errorf("%s: re-encoded\n %x\nwant %x", g.name, again, raw)
		}
	}
}
