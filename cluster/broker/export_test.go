package broker

import "github.com/raftmq/raftmq/proto"

// ReportOutcomes has b's submits report what f makes of their outcome.
func ReportOutcomes(b *Broker, f func(cmd *proto.Command, res *proto.Result, err error) (*proto.Result, error)) {
	b.reported = f
}
