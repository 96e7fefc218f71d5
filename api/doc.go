// Package api serves the gRPC admin API and the internal forwarding
// service, and exports Prometheus metrics.
package api
