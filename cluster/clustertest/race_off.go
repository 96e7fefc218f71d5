//go:build !race

package clustertest

// RaceDetector: see race_on.go.
const RaceDetector = false

// timingScale: the nodes' timings as written (race_on.go).
const timingScale = 1
