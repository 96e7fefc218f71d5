// Package group is one Raft group of a raftmq node (Group): its raft
// instance, its storage in a directory of its own (Storage: the log and
// stable store, the log cache, the snapshot store; the body store) and
// the adapter that applies its log to a state machine (FSM, State,
// AppliedIndex), and the way commands enter its log: Submitter, the group
// commit on its leader (Batcher, Request) and the forwarding stream
// (Forwarder, ServeForward). A node may open several; nothing in
// the package is shared between them but what the node gives them to
// share: its one raft listener, through a Mux that hands each group's
// connections to that group's stream layer, and its data dir, in which
// Dir places each group's directory. cluster/DESIGN.md, "The Raft
// group", draws the boundary.
package group
