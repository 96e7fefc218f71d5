// Package fault is raftmq's fault-injection suite: it brings up the
// three-node cluster of deploy/docker-compose.yml, runs confirming
// publishers and consumers on every node with mixed message TTLs,
// dead-lettering and x-expires queues, injects one fault per scenario
// (kill -9 of the leader or a follower, the leader or a follower cut off
// from the network, a rolling restart, a stop and start of the whole
// cluster, kill -9 of all three at once, the leader frozen with docker
// pause for 6 s, the leader killed three times in a row), and then checks
// that every node came back, that nothing confirmed was lost, that nothing
// was delivered after its deadline, that duplicates carry the redelivered
// flag, that the replicas' state digests agree and that x-expires queues
// died on time and only when unused. TestFaultSingleActiveConsumer kills
// the node of a single-active-consumer queue's active consumer and checks
// that the other takes over alone and in the queue's order.
//
// It needs a docker engine and the compose tool; without them it skips.
// Set RAFTMQ_FAULT_REPORT to a file name to have the per-scenario tables
// appended there (.ci/run prints them).
package fault
