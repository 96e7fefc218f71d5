package wire

import "testing"

func BenchmarkDecodeMethod_QueueDeclare(b *testing.B) {
	p := (&QueueDeclare{Queue: "orders", Durable: true, Arguments: Table{{"x-message-ttl", int32(60000)}, {"x-dead-letter-exchange", "dlx"}}}).AppendTo(nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeMethod(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendContent_Deliver1KiB(b *testing.B) {
	body := make([]byte, 1024)
	props := sampleProperties()
	m := &BasicDeliver{ConsumerTag: "amq.ctag-abc", DeliveryTag: 42, RoutingKey: "orders"}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendContent(buf[:0], 1, m, &props, body, 131072)
	}
}
