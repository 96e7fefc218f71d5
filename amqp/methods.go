package amqp

import (
	"github.com/raftmq/raftmq/amqp/wire"
)

// batchKind groups methods that go to the log together: 0 for none.
func batchKind(wire.Method) int { return 0 }

// handleRun processes a run of methods of one batch kind.
func (ch *channel) handleRun(kind int, run []item) {}

// handleMethod processes one class method on the channel's worker.
func (ch *channel) handleMethod(it item) *wire.Error {
	return wire.ConnError(wire.NotImplemented, it.m.ClassID(), it.m.MethodID(), "%s is not implemented yet", it.m.Name())
}
