package fsm

import (
	"math"

	"github.com/raftmq/raftmq/proto"
)

// x-quorum-initial-group-size (level 18) is how many replicas a new
// quorum queue asks for. RabbitMQ starts the queue on that many nodes, all
// of them when the cluster has fewer. raftmq's queues live in groups that
// exist already: a queue asking for more replicas than a queue group has
// members stays in the metadata group, on every voter (the most the
// cluster has, as RabbitMQ caps it); one asking for as many or fewer is
// placed in a queue group, with at least what it asked for (fewer than
// the group's members is not offered: a group is shared). Below level 18
// the argument was accepted whatever its value and placement ignored it,
// and a queue declared then keeps what it got.

const groupSizeArg = "x-quorum-initial-group-size"

// checkGroupSizeArg refuses, as RabbitMQ does, an initial group size that
// is not a positive integer.
func checkGroupSizeArg(q *queueState) *proto.Result { return checkIntArg(q, groupSizeArg, true) }

// groupSize is the initial group size args ask for, 0 for none; a
// declare that got this far passed checkGroupSizeArg.
func groupSize(args *proto.Table) int {
	v, ok := tableGet(args, groupSizeArg)
	if !ok {
		return 0
	}
	n, _ := valueAny(v).(int64)
	return int(min(max(n, 0), math.MaxInt32))
}
