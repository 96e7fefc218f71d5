// Package api serves a node's operator surfaces over the operations layer
// (package ops): the raftmq.v1.Admin gRPC service (NewAdminServer),
// RabbitMQ's management HTTP API with its console (NewManagement),
// Prometheus metrics (NewMetrics) and the health endpoints
// (NewHTTPHandler).
//
// Every read and write of the gRPC service and the management API is an
// ops.Service method; an *ops.Error becomes a gRPC status or RabbitMQ's
// HTTP error by its kind and reply code.
//
// Auth (auth.go) guards the Admin service as gRPC interceptors: beyond
// loopback (or always) a caller needs an administrator's username and
// password, except other nodes, which present a certificate naming a member
// (see docs/security.md).
package api
