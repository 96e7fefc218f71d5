// Package groupcost measures what one more Raft group costs a node on
// hashicorp/raft: the figures from which the queue-group plan (DESIGN.md
// at the top of the repository) chooses how many groups a cluster runs.
// It holds benchmarks only. A group here is a real hashicorp/raft
// instance with its own raft-wal log, talking to its peers over raft's
// network transport on loopback, as a raftmq node's single group does
// today; the state machine counts entries and nothing else, so the
// figures are raft's own cost.
//
//	go test -run NONE -bench . -benchtime 1x ./internal/groupcost
//
// BenchmarkIdleGroups reports each node's CPU (percent of one core) and
// goroutines with 1, 16 and 64 idle groups of three members on three
// nodes, each member on a listener of its own (mux=false) or each node's
// groups sharing one listener through cluster/group's Mux (mux=true); BenchmarkGroupsUnderLoad the entries committed and the log
// appends (each one fsync in raft-wal) per second and node when the same
// writers spread their commands over 1, 16 or 64 groups.
package groupcost
