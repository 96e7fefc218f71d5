// Command raftmq runs one raftmq node.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "raftmq: the node is not wired yet")
	os.Exit(1)
}
