// Package amqp speaks AMQP 0-9-1 to clients: the wire codec (generated from
// the specification, package wire) and the connection and channel server,
// which turns each state-changing method into a log command and performs
// the deliveries the state machine assigns to this node.
//
// A node wires it up like this:
//
//	srv := amqp.NewServer(amqp.Config{MaxMessageSize: 16 << 20, Logger: logger})
//	// srv holds the node's clients: it takes their effects, replies and pauses.
//	node, err := cluster.Start(ctx, cluster.Config{..., Sinks: cluster.SinksTo(srv)})
//	srv.SetBroker(broker.New(node, nil)) // package cluster/broker
//	go srv.Serve(listener)
//	...
//	srv.Close()
//
// Admin services list and close connections through srv.Connections().
// DESIGN.md explains the choices.
package amqp
