// Package wire is the AMQP 0-9-1 codec: frames, methods, content headers and
// field tables in RabbitMQ's dialect.
//
// The method structs, the reply codes and the content-header properties are
// generated from the specification XML (files zz_generated_*.go); frames,
// primitives and field tables are written by hand. Decoding works on a
// bounded byte slice: it never panics and never allocates more than the
// input holds.
package wire
