//go:build race

package cluster_test

// raceDetector: the race detector instruments every byte a test moves, so
// tests of bodies tens of MiB large shrink under it.
const raceDetector = true
