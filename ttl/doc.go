// Package ttl holds the time-to-live rules: argument, property and policy
// parsing and validation, the effective TTL, deadlines, queue-lease math and
// x-death headers. It is pure: every function takes "now" as an argument.
package ttl
