#!/usr/bin/env bash
# Whether a queue in a queue group of its own is kept from another queue's
# traffic or backlog: one round on a fresh three-node cluster
# (three-nodes.sh; NODE_ARGS, PORTS and DIR as there), then the cluster
# is stopped. The first argument names the round:
#   busy     8 KiB persistent at 1,000/s into "big" with its consumer and,
#            at the same time, 1 KiB paced at 1,000/s into "paced" with its
#            consumer, for BUSY (default 40s)
#   backlog  first "paced" alone for PACED (default 30s: the baseline),
#            then FILL (default 500000) 1 KiB confirmed into "backlog" with
#            no consumer, then "paced2" paced at once for PACED
#   idle     IDLE_QUEUES (default 1000) durable queues declared, then
#            the nodes' CPU over IDLE (default 60s), and each node's
#            goroutines before and after
# Each raftmq-perf report goes to $DIR/<queue>.out (the last line is its
# JSON); where each queue lives (list_queues name raft_group leader) to
# stdout. With --place-queues in NODE_ARGS a probe queue is declared until
# one lands in a queue group, since placement switches on a moment after
# the cluster forms.
#   NODE_ARGS="--queue-groups 3 --place-queues" cmd/raftmq-perf/scripts/groups-isolation.sh busy
set -euo pipefail
cd "$(dirname "$0")/../../.."
export DIR=${DIR:-/tmp/raftmq-isolation} PORTS=${PORTS:-0}
o=$PORTS
mode=${1:?busy, backlog or idle}
urls=$(cmd/raftmq-perf/scripts/three-nodes.sh | tail -1)
trap 'cmd/raftmq-perf/scripts/three-nodes.sh stop' EXIT
go build -o "$DIR/raftmqctl" ./cmd/raftmqctl
pids=$(awk 1 "$DIR"/n1.pid "$DIR"/n2.pid "$DIR"/n3.pid | paste -sd,)
perf() { "$DIR/raftmq-perf" "$@"; }
ctl() { "$DIR/raftmqctl" -n "127.0.0.1:$((25681 + o))" --data-dir "$DIR/n1" -q "$@"; }
IFS=, read -r -a u <<<"$urls"
# Every node serves: a publish confirmed on each.
for i in 0 1 2; do
  for _ in $(seq 1 300); do
    perf -uri "${u[$i]}" -producers 1 -consumers 0 -count 1 -duration 5s -queue warm-up 2>/dev/null | grep -q '"confirmed":1,' && break
    sleep 0.2
  done
done
case "${NODE_ARGS:-}" in *--place-queues*)
  placed=
  for k in $(seq 1 150); do
    perf -uri "${u[0]}" -producers 1 -consumers 0 -count 1 -duration 5s -queue "probe-$k" >/dev/null 2>&1 || true
    g=$(ctl --no-table-headers list_queues name raft_group 2>/dev/null | awk -v q="probe-$k" '$1 == q {print $2}')
    if [ -n "$g" ] && [ "$g" != metadata ]; then
      placed=$g; break
    fi
    sleep 0.2
  done
  [ -n "$placed" ] || { echo "no queue placed in a queue group" >&2; exit 1; }
  echo "placing: probe-$k in $placed" ;;
esac
where() { ctl list_queues name raft_group leader messages; }
case "$mode" in
  busy)
    d=${BUSY:-40s}
    perf -uri "$urls" -size 8192 -rate 1000 -duration "$d" -queue big -pids "$pids" >"$DIR/big.out" 2>&1 &
    a=$!
    perf -uri "$urls" -size 1024 -rate 1000 -duration "$d" -queue paced -slow 20ms -pids "$pids" >"$DIR/paced.out" 2>"$DIR/paced.slow" &
    b=$!
    sleep 5
    where
    wait "$a" "$b" ;;
  backlog)
    d=${PACED:-30s}
    perf -uri "$urls" -size 1024 -rate 1000 -duration "$d" -queue paced -pids "$pids" >"$DIR/paced.out" 2>&1
    s=$(date +%s.%N)
    perf -uri "$urls" -size 1024 -confirm 256 -producers 2 -consumers 0 -count $((${FILL:-500000} / 2)) -duration 30m -queue backlog -pids "$pids" >"$DIR/backlog.out" 2>&1
    echo "fill took $(echo "$(date +%s.%N) - $s" | bc) s"
    perf -uri "$urls" -size 1024 -rate 1000 -duration "$d" -queue paced2 -slow 20ms -pids "$pids" >"$DIR/paced2.out" 2>"$DIR/paced2.slow" &
    b=$!
    sleep 5
    where
    wait "$b" ;;
  idle)
    gor() { for i in 1 2 3; do curl -s "http://127.0.0.1:$((25694 + i + o))/debug/pprof/goroutine?debug=1" | head -1 | grep -o '[0-9]*$'; done | paste -sd' '; }
    echo "goroutines before: $(gor)"
    perf -uri "$urls" -pids "$pids" -mode queues -count "${IDLE_QUEUES:-1000}" -producers 4 -queue idle -duration "${IDLE:-60s}" >"$DIR/idle.out" 2>&1
    echo "goroutines after: $(gor)"
    ctl --no-table-headers list_queues name raft_group | awk '$1 ~ /^idle-/ {n[$2]++} END {for (g in n) printf "%s %d\n", g, n[g]}' ;;
  *) echo "unknown round $mode" >&2; exit 2 ;;
esac
