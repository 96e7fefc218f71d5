//go:build race

package amqp

// raceDetector: the race detector slows every node several times over;
// the largest in-process clusters are left to runs without it.
const raceDetector = true
