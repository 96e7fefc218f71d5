// Package api holds a node's operator surfaces, each in a package of its
// own over one operations layer:
//
//   - ops: every read and write the surfaces offer, called in process,
//     with typed errors that carry the AMQP reply code and text;
//   - grpcadmin: the raftmq.v1.Admin gRPC service and its authentication;
//   - mgmt: RabbitMQ's management HTTP API and the web console;
//   - metrics: Prometheus metrics and the health endpoints;
//   - client: credentials and dialing for a client of the Admin service
//     (raftmqctl), which links none of the server.
//
// DESIGN.md says why the surfaces are split this way.
package api
