//go:build race

package clustertest

// RaceDetector reports whether the tests run under the race detector,
// which makes every byte a node moves several times dearer: tests that
// move huge bodies or run the largest clusters size themselves by it.
const RaceDetector = true

// timingScale stretches the test nodes' raft, gossip and down timings
// under the race detector. It makes every node's work several times
// dearer, and five in-process nodes each running six raft groups then
// need about a core to keep their leaders' leases: a package's tests
// share this machine's cores with another package's, and on a CI machine
// half as fast their leaders lost their leases (150 ms) one after the
// other, elections never completed, and the tests failed with
// "leadership lost" or waited in vain for a leader. Twice the timings
// held on 0.6 of a core where the plain ones failed every time.
const timingScale = 2
