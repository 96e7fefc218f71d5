// Package api serves a node's operator surfaces: the raftmq.v1.Admin gRPC
// service (NewAdminServer), Prometheus metrics (NewMetrics) and the health
// endpoints (NewHTTPHandler).
//
// The service sees the node through small interfaces (Node, State,
// Connections, Peers) so it can be tested with fakes; FromCluster and
// ClusterStats adapt a *cluster.Node. Writes become log commands: policies
// are validated first (InvalidArgument), passwords are salted and hashed
// before they leave the service, and a refused command's AMQP reply code
// becomes a gRPC status (404 NotFound, 403 PermissionDenied, 405 and 406
// FailedPrecondition, others Unknown). Reads come from the local state, or
// from the leader when the request asks for a consistent read: a follower
// forwards the same call to the leader's Admin service, once.
//
// Management (mgmt*.go) serves RabbitMQ's management HTTP API over the same
// service: its writes are AdminServer operations (ops.go has those only it
// needs), it checks HTTP basic credentials with RabbitMQ's user tags, and
// it exports and imports definitions (docs/management.md).
//
// Auth (auth.go) guards the Admin service as gRPC interceptors: beyond
// loopback (or always) a caller needs an administrator's username and
// password, except other nodes, which present a certificate naming a member
// (see docs/security.md).
package api
