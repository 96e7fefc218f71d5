#!/usr/bin/env bash
# Starts a three-node RabbitMQ cluster on loopback (Debian's rabbitmq-server,
# `apt-get install rabbitmq-server`) so that raftmq-perf can measure it side
# by side with raftmq; prints the AMQP URLs. `rabbitmq-three-nodes.sh stop`
# stops it. Data goes to ${DIR:-/tmp/rabbitmq-perf}. Declare quorum queues
# with raftmq-perf -queue-args '{"x-queue-type":"quorum"}'.
#   U=$(cmd/raftmq-perf/scripts/rabbitmq-three-nodes.sh)
#   go run ./cmd/raftmq-perf -uri "$U" -queue-args '{"x-queue-type":"quorum"}'
set -euo pipefail
dir=${DIR:-/tmp/rabbitmq-perf}
bin=/usr/lib/rabbitmq/bin
urls="amqp://guest:guest@127.0.0.1:16672/,amqp://guest:guest@127.0.0.1:16673/,amqp://guest:guest@127.0.0.1:16674/"
export HOME=$dir # the Erlang cookie the three nodes and rabbitmqctl share

node() { echo "rmq$1@localhost"; }
ctl() { "$bin/rabbitmqctl" -n "$(node "$1")" "${@:2}"; }

case "${1:-start}" in
  urls) echo "$urls"; exit 0 ;;
  stop)
    for i in 1 2 3; do ctl "$i" stop >/dev/null 2>&1 || true; done
    exit 0 ;;
esac
if [ ! -x "$bin/rabbitmq-server" ]; then
  echo "rabbitmq-server is not installed (apt-get install rabbitmq-server)" >&2
  exit 1
fi
"$0" stop
rm -rf "$dir" && mkdir -p "$dir"
for i in 1 2 3; do
  mkdir -p "$dir/n$i"
  : >"$dir/n$i/enabled_plugins.conf"
  RABBITMQ_NODENAME=$(node "$i") RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT=$((16671 + i)) RABBITMQ_DIST_PORT=$((16681 + i)) \
    RABBITMQ_MNESIA_BASE="$dir/n$i/mnesia" RABBITMQ_LOG_BASE="$dir/n$i/log" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$dir/n$i/enabled_plugins.conf" \
    RABBITMQ_PID_FILE="$dir/n$i/pid" \
    "$bin/rabbitmq-server" >"$dir/n$i.out" 2>&1 &
done
for i in 1 2 3; do
  ctl "$i" wait --timeout 120 "$dir/n$i/pid" >/dev/null
done
for i in 2 3; do
  ctl "$i" stop_app >/dev/null
  ctl "$i" join_cluster "$(node 1)" >/dev/null
  ctl "$i" start_app >/dev/null
done
echo "$urls"
