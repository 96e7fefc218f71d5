#!/usr/bin/env bash
# The queue-groups run: three nodes (three-nodes.sh), each in a cgroup of
# its own with a CPU quota of QUOTA per cent of a core (default 25: each
# node as if it were its own small machine), QUEUES queues (default 6),
# each with one confirming publisher and one consumer on two different
# nodes, publishing for DURATION (default 20s). Prints one line: the
# messages consumed per second over all queues, and each node's CPU
# seconds over the run. NODE_ARGS is passed to every node, e.g.
#   NODE_ARGS="--queue-groups 3 --place-queues" cmd/raftmq-perf/scripts/groups-scale.sh
# BIN, when set, is a raftmq binary to run instead of this checkout's
# (the landed release, built from its commit). Needs root for the
# cgroups (cgroup v1's cpu controller, or v2's cpu.max).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export DIR=${DIR:-/tmp/raftmq-groups} PORTS=${PORTS:-0}
quota=${QUOTA:-25} queues=${QUEUES:-6} duration=${DURATION:-20s}
o=$PORTS
urls=$(cmd/raftmq-perf/scripts/three-nodes.sh | tail -1)
if [ -n "${BIN:-}" ]; then
  cmd/raftmq-perf/scripts/three-nodes.sh stop
  rm -rf "$DIR"/n1 "$DIR"/n2 "$DIR"/n3
  cp "$BIN" "$DIR/raftmq"
  (cd "$DIR" && RAFTMQ_CLUSTER_SECRET=$(cat secret) && export RAFTMQ_CLUSTER_SECRET && for i in 1 2 3; do
    ./raftmq --node-id "n$i" --data-dir "n$i" --bootstrap-expect 3 --join "127.0.0.1:$((27941 + o))" \
      --amqp-addr "127.0.0.1:$((25671 + i + o))" --grpc-addr "127.0.0.1:$((25680 + i + o))" --raft-addr "127.0.0.1:$((25690 + i + o))" \
      --gossip-addr "127.0.0.1:$((27940 + i + o))" --http-addr "127.0.0.1:$((25694 + i + o))" --management-addr "" >>"n$i.log" 2>&1 &
    echo $! >"n$i.pid"
  done)
fi
cg() {
  if [ -d /sys/fs/cgroup/cpu ]; then echo "/sys/fs/cgroup/cpu/raftmq-$o-n$1"; else echo "/sys/fs/cgroup/raftmq-$o-n$1"; fi
}
for i in 1 2 3; do
  d=$(cg "$i")
  mkdir -p "$d"
  if [ -f "$d/cpu.cfs_quota_us" ]; then
    echo 100000 >"$d/cpu.cfs_period_us"
    echo $((quota * 1000)) >"$d/cpu.cfs_quota_us"
  else
    echo "$((quota * 1000)) 100000" >"$d/cpu.max"
  fi
  cat "$DIR/n$i.pid" >"$d/cgroup.procs"
done
trap 'for i in 1 2 3; do rmdir "$(cg "$i")" 2>/dev/null || true; done' EXIT
IFS=, read -r -a u <<<"$urls"
# Every node serves (a publish confirmed on each), and the queue groups,
# when asked for, run and place queues: a queue declared now lands in one.
for i in 0 1 2; do
  for _ in $(seq 1 300); do
    "$DIR/raftmq-perf" -uri "${u[$i]}" -producers 1 -consumers 0 -count 1 -duration 5s -queue warm-up 2>/dev/null | grep -q '"confirmed":1,' && break
    sleep 0.2
  done
done
case "${NODE_ARGS:-}" in *--place-queues*)
  for _ in $(seq 1 300); do
    grep -q "new queues are placed into queue groups" "$DIR"/n?.log && break
    sleep 0.2
  done ;;
esac
cpu() { for i in 1 2 3; do awk '{print $14 + $15}' "/proc/$(cat "$DIR/n$i.pid")/stat"; done; }
read -r -d '' -a before < <(cpu) || true
pids=()
for q in $(seq 1 "$queues"); do
  # The publisher on one node, the consumer on the next.
  a=${u[$(((q - 1) % 3))]} b=${u[$((q % 3))]}
  "$DIR/raftmq-perf" -uri "$a,$b" -producers 1 -consumers 1 -duration "$duration" -queue "scale-$q" >"$DIR/scale-$q.out" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
read -r -d '' -a after < <(cpu) || true
hz=$(getconf CLK_TCK)
total=0
for q in $(seq 1 "$queues"); do
  r=$(grep -o '"consumed_in_run":[0-9]*' "$DIR/scale-$q.out" | cut -d: -f2)
  s=$(grep -o '"seconds":[0-9.]*' "$DIR/scale-$q.out" | cut -d: -f2)
  total=$(echo "$total + $r / $s" | bc -l)
done
printf 'consumed/s %.0f; cpu-s n1 %.1f n2 %.1f n3 %.1f\n' "$total" \
  "$(echo "(${after[0]} - ${before[0]}) / $hz" | bc -l)" "$(echo "(${after[1]} - ${before[1]}) / $hz" | bc -l)" "$(echo "(${after[2]} - ${before[2]}) / $hz" | bc -l)"
cmd/raftmq-perf/scripts/three-nodes.sh stop
