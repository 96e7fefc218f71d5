package main

import "strings"

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
