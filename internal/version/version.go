// Package version is the one answer to "which raftmq is this": the build
// sets it, and every surface that names the product's version (raftmq
// --version, AMQP's connection.start, the management API, Prometheus'
// build info) reads it here, so they cannot disagree.
package version

import "runtime/debug"

// Version is the release this build is, set with -ldflags
// "-X github.com/raftmq/raftmq/internal/version.Version=v1.2.3".
var Version string

// String is Version when the build set it, else the version the Go
// toolchain recorded (the module version of `go install module@version`,
// or a pseudo-version from the work tree's commit), else "dev" (a build
// with neither, such as one from a copy without its git history).
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		return fromBuildInfo(bi)
	}
	return "dev"
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	return "dev"
}
