// Package cluster is a raftmq node: Raft setup (the group's storage and
// state machine adapter are package group), memberlist discovery
// (package membership), the links' security (package linksec), log time
// (package clock), forwarding of commands to the leader and the
// leader-only loops (expiry scheduler, queue leases, node-down). The node
// composes those parts; none of them imports this package.
//
// A caller starts a node with Start, registers its own services on the same
// grpc.Server, serves it, and waits for Ready before taking clients:
//
//	node, err := cluster.Start(ctx, cluster.Config{NodeID: ..., GRPCServer: srv, Sinks: cluster.SinksTo(amqpServer), ...})
//	go srv.Serve(lis)
//	<-node.Ready()
//	res, err := node.Submit(ctx, cmd) // committed and applied on this node
//	node.View(func(m *fsm.Machine) { ... }) // read under the state lock
//
// Submit works on every node: a follower forwards to the leader over one
// gRPC stream. Errors: ErrNotLeader, ErrNoLeader, ErrClosed and
// ErrOutcomeUnknown (the command may or may not have committed). DESIGN.md
// explains the choices; package clustertest runs in-process clusters for
// tests.
package cluster
