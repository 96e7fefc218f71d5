package cluster

import "context"

// RaiseProtocol runs one round of the leader's protocol-level check now,
// so a test can tell "not raised" from "not checked yet".
func (n *Node) RaiseProtocol(ctx context.Context) { n.raiseProtocol(ctx) }
