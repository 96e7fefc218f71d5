#!/usr/bin/env bash
# Runs the amqp091-go client's own integration tests against a raftmq node.
#
#   e2e/scripts/amqp091-integration.sh            # starts a single node itself
#   AMQP_URL=amqp://guest:guest@host:5672/ e2e/scripts/amqp091-integration.sh
#
# The client's module is taken from the Go module cache at the version
# go.mod pins, copied to a scratch folder and tested there with
# `go test -tags integration`. Extra arguments go to `go test` (e.g. -run).
# Tests that need RabbitMQ-only tooling are skipped by name in SKIP below.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Tests that cannot pass against any broker but RabbitMQ itself. Each of
# these force-closes its own connection through RabbitMQ's management HTTP
# API, hard-wired to http://localhost:15672/api/connections (utils.
# DropConnection, via dropConnection in recovery_test.go); raftmq's admin
# API is gRPC (raftmqctl close_connection), so nothing would answer there.
# Every other test runs, including TestConnectionRecoverySkipAndContinue-
# NoInfiniteLoop, which recovers from a channel error without that API.
#
# Three tests run their checks only when the server's product property is
# "RabbitMQ" and otherwise return without closing the connection they
# opened (integrationRabbitMQ, and the product check in
# TestIntegrationRecoverNotImplemented): against raftmq they assert nothing
# and their leaked connections fail the package's goleak check in
# TestMain. With that gate lifted raftmq passes all three (queue TTL on
# get, nack multiple with requeue, basic.recover requeue=false refused
# with 540).
#
# TestConnection_Close_WhenMemoryAlarmIsActive skips itself unless
# rabbitmqctl is available (it raises a RabbitMQ memory alarm).
SKIP='^TestConnectionRecovery(Publish|Consume|CustomSASLPlainAuth|ChannelIDReservation|LifeCycleNotifyStateChange|CancelInterrupt|ExclusiveQueue|DeletedQueueSkip|TopologyOnlyTransient|MultiChannelTopology|TopologyAllEnabled|TopologyDisabled|ExhaustionDoesNotPanic|AutoDeleteTopologyForgotten|AutoDeleteExchangeCascade|SkipAndContinue|ConsumerNotForgottenAfterFailedResubscribe)$|^(TestRabbitMQQueueTTLGet|TestRabbitMQQueueNackMultipleRequeue|TestIntegrationRecoverNotImplemented)$'

work=$(mktemp -d)
node_pid=""
cleanup() {
  if [ -n "$node_pid" ]; then kill "$node_pid" 2>/dev/null || true; wait "$node_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${AMQP_URL:-}" ]; then
  CGO_ENABLED=0 go build -o "$work/raftmq" ./cmd/raftmq
  port=$((20000 + RANDOM % 20000))
  "$work/raftmq" --data-dir "$work/data" --amqp-addr "127.0.0.1:$port" \
    --grpc-addr 127.0.0.1:0 --raft-addr "127.0.0.1:$((port + 1))" \
    --gossip-addr "127.0.0.1:$((port + 2))" --http-addr 127.0.0.1:0 \
    >"$work/raftmq.log" 2>&1 &
  node_pid=$!
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.2
  done
  export AMQP_URL="amqp://guest:guest@127.0.0.1:$port/"
fi

mod=$(go list -m -f '{{.Dir}}' github.com/rabbitmq/amqp091-go)
cp -r "$mod" "$work/amqp091-go"
chmod -R u+w "$work/amqp091-go"
cd "$work/amqp091-go"
echo "amqp091-go $(basename "$mod") against $AMQP_URL"
status=0
go test -count=1 -tags integration -skip "$SKIP" -timeout 20m "$@" ./... || status=$?
if [ "$status" != 0 ] && [ -n "$node_pid" ]; then
  echo "---- raftmq log (tail) ----"; tail -50 "$work/raftmq.log"
fi
exit "$status"
