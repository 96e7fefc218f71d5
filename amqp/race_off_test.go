//go:build !race

package amqp

const raceDetector = false
