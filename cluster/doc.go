// Package cluster is a raftmq node: Raft setup and storage, memberlist
// discovery, forwarding of commands to the leader, the leader's clock and the
// leader-only loops (expiry scheduler, queue leases, node-down).
package cluster
