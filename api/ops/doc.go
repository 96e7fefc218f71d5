// Package ops is the operations layer of a node's operator surfaces: every
// read and write that the raftmq.v1.Admin gRPC service, the management HTTP
// API and its console offer is one method of Service, called in process.
//
// Service sees the node through small interfaces (Node, State,
// Connections, Peers) so that it can be tested with fakes; FromCluster and
// ClusterStats adapt a *cluster.Node. Writes become log commands: requests
// are checked first (policies, permission patterns), passwords are salted
// and hashed before they leave the layer, and a command the state machine
// refuses comes back as an *Error carrying its AMQP reply code and text.
// Reads come from the local state, or from the leader when the request
// asks for a consistent read: a follower forwards the same call to the
// leader's Admin service, once.
//
// Errors are *Error values whose Kind each front end maps once: the gRPC
// service to a status code (Kind.GRPCCode), the management API to an HTTP
// status. Nothing downstream reads a reply code back out of text.
package ops
