#!/usr/bin/env bash
# Starts three raftmq nodes on loopback for load runs and prints their AMQP
# URLs; `three-nodes.sh stop` stops them. Data goes to ${DIR:-/tmp/raftmq-perf}.
# NODES=N (default 3, at most 7) starts N nodes instead, with
# --bootstrap-expect N. Node i listens on AMQP 25671+i, gRPC 25680+i,
# gossip 27940+i, HTTP 25694+i and raft 25690+i for i up to 3; raft
# 25700+i for nodes 4 to 7 (25690+i would be node 1's HTTP port at 5).
# PORTS=N moves every port up by N, so that two clusters can run side by side
# (give each its own DIR). NODE_GODEBUG, when set, is the nodes' GODEBUG
# (e.g. gctrace=1: a line per collection in each node's log); NODE_ARGS,
# when set, is added to each node's flags (e.g. --max-message-size 75497472);
# with --queue-groups N (or per-node) there, the start returns once the groups' leaders
# have spread over the nodes (at most 20 s more).
# `three-nodes.sh restart` stops all the nodes and starts
# them again on their data (SIG=KILL to kill them instead of SIGTERM), and
# prints the seconds until every node serves: AMQP connect and a publish
# the broker confirmed, on each node (give it the NODES of the start).
#   cmd/raftmq-perf/scripts/three-nodes.sh
#   go run ./cmd/raftmq-perf -uri "$(cmd/raftmq-perf/scripts/three-nodes.sh urls)"
set -euo pipefail
cd "$(dirname "$0")/../../.."
dir=${DIR:-/tmp/raftmq-perf}
o=${PORTS:-0}
n=${NODES:-3}
case "$n" in [1-7]) ;; *) echo "NODES must be 1 to 7" >&2; exit 1 ;; esac
raftport() { if [ "$1" -le 3 ]; then echo $((25690 + $1 + o)); else echo $((25700 + $1 + o)); fi; }
urls=$(for i in $(seq 1 "$n"); do printf 'amqp://guest:guest@127.0.0.1:%d/\n' $((25671 + i + o)); done | paste -sd,)
# launch: start the nodes on the data in $dir.
launch() {
  RAFTMQ_CLUSTER_SECRET=$(cat "$dir/secret")
  export RAFTMQ_CLUSTER_SECRET
  for i in $(seq 1 "$n"); do
    env ${NODE_GODEBUG:+GODEBUG="$NODE_GODEBUG"} "$dir/raftmq" --node-id "n$i" --data-dir "$dir/n$i" --bootstrap-expect "$n" --join "127.0.0.1:$((27941 + o))" \
      --amqp-addr "127.0.0.1:$((25671 + i + o))" --grpc-addr "127.0.0.1:$((25680 + i + o))" --raft-addr "127.0.0.1:$(raftport "$i")" \
      --gossip-addr "127.0.0.1:$((27940 + i + o))" --http-addr "127.0.0.1:$((25694 + i + o))" --management-addr "" --pprof ${NODE_ARGS:-} >>"$dir/n$i.log" 2>&1 &
    echo $! >"$dir/n$i.pid"
  done
}
case "${1:-start}" in
  urls) echo "$urls"; exit 0 ;;
  restart)
    [ -x "$dir/raftmq-perf" ] && [ -f "$dir/secret" ] || { echo "no cluster started in $dir" >&2; exit 1; }
    if [ "${SIG:-TERM}" = KILL ]; then
      for i in $(seq 1 "$n"); do kill -9 "$(cat "$dir/n$i.pid")" 2>/dev/null || true; done
    fi
    "$0" stop
    start=$(date +%s.%N)
    launch
    # Serving: each node takes a connection and confirms a publish.
    for i in $(seq 1 "$n"); do
      u="amqp://guest:guest@127.0.0.1:$((25671 + i + o))/"
      for _ in $(seq 1 600); do
        if ! kill -0 "$(cat "$dir/n$i.pid")" 2>/dev/null; then echo "n$i exited:" >&2; tail -3 "$dir/n$i.log" >&2; exit 1; fi
        if "$dir/raftmq-perf" -uri "$u" -producers 1 -consumers 0 -count 1 -duration 5s -queue restart-probe 2>/dev/null | grep -q '"confirmed":1,'; then break; fi
        sleep 0.1
      done
    done
    echo "serving after $(echo "$(date +%s.%N) - $start" | bc) s"
    exit 0 ;;
  stop)
    # Every node that has a pid file, whatever NODES is now.
    for i in 1 2 3 4 5 6 7; do [ -f "$dir/n$i.pid" ] && kill "$(cat "$dir/n$i.pid")" 2>/dev/null || true; done
    # Wait for them to exit, so a start right after finds the ports free.
    for i in 1 2 3 4 5 6 7; do
      [ -f "$dir/n$i.pid" ] || continue
      for _ in $(seq 1 200); do kill -0 "$(cat "$dir/n$i.pid")" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$(cat "$dir/n$i.pid")" 2>/dev/null || true
      rm -f "$dir/n$i.pid"
    done
    exit 0 ;;
esac
"$0" stop
rm -rf "$dir" && mkdir -p "$dir"
CGO_ENABLED=0 go build -o "$dir/raftmq" ./cmd/raftmq
go build -o "$dir/raftmq-perf" ./cmd/raftmq-perf
# The nodes share a cluster secret; a fresh one for each cluster, kept for
# its restarts.
(umask 077; head -c 32 /dev/urandom | base64 >"$dir/secret")
launch
for i in $(seq 1 "$n"); do
  for _ in $(seq 1 150); do
    if ! kill -0 "$(cat "$dir/n$i.pid")" 2>/dev/null; then
      echo "n$i exited (is another broker on its ports?):" >&2; tail -3 "$dir/n$i.log" >&2; exit 1
    fi
    if "$dir/raftmq" probe "http://127.0.0.1:$((25694 + i + o))/readyz" 2>/dev/null; then break; fi
    sleep 0.2
  done
done
# With queue groups, a new cluster's first elections fall on whichever
# member stands first, and each group goes to the member meant to lead it
# 2 s later: a run started before that measures the hand-overs. Wait
# until the groups' leaders are spread (as many as there are groups, or
# nodes), at most 20 s.
groups=$(echo " ${NODE_ARGS:-} " | sed -n 's/.* --queue-groups[ =]\([0-9][0-9]*\|per-node\) .*/\1/p')
# per-node: one group a node, at least three.
if [ "$groups" = per-node ]; then groups=$((n > 3 ? n : 3)); fi
if [ "${groups:-0}" -gt 0 ]; then
  go build -o "$dir/raftmqctl" ./cmd/raftmqctl
  for _ in $(seq 1 100); do
    if "$dir/raftmqctl" --node "127.0.0.1:$((25681 + o))" --data-dir "$dir/n1" -s list_groups name leader 2>/dev/null |
      awk -v n="$n" -v want="$groups" '$1 != "metadata" { g++; if ($2 != "") l[$2] = 1 } END { for (k in l) d++; exit !(g == want && d >= (g < n ? g : n)) }'; then
      break
    fi
    sleep 0.2
  done
fi
echo "$urls"
