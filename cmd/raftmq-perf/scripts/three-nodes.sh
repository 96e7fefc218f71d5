#!/usr/bin/env bash
# Starts three raftmq nodes on loopback for load runs and prints their AMQP
# URLs; `three-nodes.sh stop` stops them. Data goes to ${DIR:-/tmp/raftmq-perf}.
#   cmd/raftmq-perf/scripts/three-nodes.sh
#   go run ./cmd/raftmq-perf -uri "$(cmd/raftmq-perf/scripts/three-nodes.sh urls)"
set -euo pipefail
cd "$(dirname "$0")/../../.."
dir=${DIR:-/tmp/raftmq-perf}
urls="amqp://guest:guest@127.0.0.1:25672/,amqp://guest:guest@127.0.0.1:25673/,amqp://guest:guest@127.0.0.1:25674/"
case "${1:-start}" in
  urls) echo "$urls"; exit 0 ;;
  stop)
    for i in 1 2 3; do [ -f "$dir/n$i.pid" ] && kill "$(cat "$dir/n$i.pid")" 2>/dev/null || true; done
    # Wait for them to exit, so a start right after finds the ports free.
    for i in 1 2 3; do
      [ -f "$dir/n$i.pid" ] || continue
      for _ in $(seq 1 200); do kill -0 "$(cat "$dir/n$i.pid")" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$(cat "$dir/n$i.pid")" 2>/dev/null || true
    done
    exit 0 ;;
esac
"$0" stop
rm -rf "$dir" && mkdir -p "$dir"
CGO_ENABLED=0 go build -o "$dir/raftmq" ./cmd/raftmq
# The nodes share a cluster secret; a fresh one for each run.
RAFTMQ_CLUSTER_SECRET=$(head -c 32 /dev/urandom | base64)
export RAFTMQ_CLUSTER_SECRET
for i in 1 2 3; do
  "$dir/raftmq" --node-id "n$i" --data-dir "$dir/n$i" --bootstrap-expect 3 --join 127.0.0.1:27941 \
    --amqp-addr "127.0.0.1:2567$((i + 1))" --grpc-addr "127.0.0.1:2568$i" --raft-addr "127.0.0.1:2569$i" \
    --gossip-addr "127.0.0.1:2794$i" --http-addr "127.0.0.1:2569$((i + 4))" --management-addr "" --pprof >"$dir/n$i.log" 2>&1 &
  echo $! >"$dir/n$i.pid"
done
for i in 1 2 3; do
  for _ in $(seq 1 150); do
    if ! kill -0 "$(cat "$dir/n$i.pid")" 2>/dev/null; then
      echo "n$i exited (is another broker on its ports?):" >&2; tail -3 "$dir/n$i.log" >&2; exit 1
    fi
    if "$dir/raftmq" probe "http://127.0.0.1:2569$((i + 4))/readyz" 2>/dev/null; then break; fi
    sleep 0.2
  done
done
echo "$urls"
