//go:build !race

package clustertest

// timingScale: the nodes' timings as written (race_on.go).
const timingScale = 1
