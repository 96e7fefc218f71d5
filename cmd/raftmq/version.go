package main

import (
	"runtime/debug"
	"strings"
)

// version is the release this binary was built as, set by the build with
// -ldflags "-X main.version=v1.2.3". Without it the module version that
// `go install module@version` records is used, and "dev" for a build from
// a work tree, which carries no version.
var version string

// buildVersion returns what raftmq --version prints.
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// wantsVersion reports whether the command line asks for the version
// (--version or -version before any "--"). It is looked for before the
// flags are parsed so that it is not also read from the environment as
// every config flag is: RAFTMQ_VERSION must not turn a node into a
// command that prints and exits.
func wantsVersion(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if strings.TrimLeft(a, "-") == "version" && strings.HasPrefix(a, "-") {
			return true
		}
	}
	return false
}
