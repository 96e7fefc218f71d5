// Package metrics serves a node's Prometheus metrics (New), raftmq's own
// and RabbitMQ's names for the dashboards made for RabbitMQ, and the
// health endpoints /healthz and /readyz beside them (NewHandler).
//
// It reads the node through the interfaces of package ops (Node,
// Connections, StateStats) and writes nothing.
package metrics
