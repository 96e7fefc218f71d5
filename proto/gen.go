// Package proto holds raftmq's protocol buffers: the log commands (an
// Envelope per Raft entry) and the gRPC services, with their generated code.
package proto

// buf, not Debian's protoc (3.21), compiles the files: they use edition
// 2023 (see command.proto). It runs from the Go module proxy at a pinned
// version and stays out of go.mod; the plugins are go.mod's (buf.gen.yaml).
//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
