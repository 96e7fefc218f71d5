// Package mgmt serves RabbitMQ's management HTTP API over one node (New):
// the routes and JSON shapes of RabbitMQ 3.10's rabbitmq_management plugin
// that tools use, and the web console (package console) on the same
// listener.
//
// Reads come from the node's applied state; every write is an
// ops.Service operation, so it goes through the log from any node, and an
// *ops.Error becomes RabbitMQ's HTTP error by its kind (a refused command
// is 400 with the AMQP reply text, a missing object 404). It checks HTTP
// basic credentials with RabbitMQ's user tags, and it exports and imports
// definitions (docs/management.md).
package mgmt
