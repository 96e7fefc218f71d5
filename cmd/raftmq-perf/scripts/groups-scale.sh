#!/usr/bin/env bash
# The queue-groups run: NODES nodes (default 3; three-nodes.sh, which
# takes NODES up to 5), each in a cgroup of its own with a CPU quota of
# QUOTA per cent of a core (default 25: each node as if it were its own
# small machine), QUEUES queues (default 6), each with one confirming
# publisher and one consumer on two different nodes (queue k's publisher
# on node k, its consumer on node k+1, round the nodes), publishing for
# DURATION (default 20s). Prints one line: the messages consumed per
# second over all queues, and each node's CPU seconds over the run; and,
# on stderr, where each queue lives 5 s into the run (raftmqctl
# list_queues name raft_group) and each group's leader and members. NODE_ARGS is passed to
# every node, e.g.
#   NODE_ARGS="--queue-groups 3 --place-queues" cmd/raftmq-perf/scripts/groups-scale.sh
#   NODES=5 NODE_ARGS="--queue-groups 3 --place-queues" cmd/raftmq-perf/scripts/groups-scale.sh
# BIN, when set, is a raftmq binary to run instead of this checkout's
# (the landed release, built from its commit; NODE_ARGS goes to it
# too). QUEUE_ARGS, when set, is each queue's arguments as JSON, e.g.
# '{"x-queue-leader-locator":"client-local"}' (the queue is declared from
# its publisher's node). Needs root for the
# cgroups (cgroup v1's cpu controller, or v2's cpu.max).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export DIR=${DIR:-/tmp/raftmq-groups} PORTS=${PORTS:-0} NODES=${NODES:-3}
quota=${QUOTA:-25} queues=${QUEUES:-6} duration=${DURATION:-20s}
o=$PORTS n=$NODES
# The ports of three-nodes.sh: raft 25700+i for nodes 4 and 5.
raftport() { if [ "$1" -le 3 ]; then echo $((25690 + $1 + o)); else echo $((25700 + $1 + o)); fi; }
urls=$(cmd/raftmq-perf/scripts/three-nodes.sh | tail -1)
go build -o "$DIR/raftmqctl" ./cmd/raftmqctl
if [ -n "${BIN:-}" ]; then
  cmd/raftmq-perf/scripts/three-nodes.sh stop
  for i in $(seq 1 "$n"); do rm -rf "${DIR:?}/n$i"; done
  cp "$BIN" "$DIR/raftmq"
  (cd "$DIR" && RAFTMQ_CLUSTER_SECRET=$(cat secret) && export RAFTMQ_CLUSTER_SECRET && for i in $(seq 1 "$n"); do
    ./raftmq --node-id "n$i" --data-dir "n$i" --bootstrap-expect "$n" --join "127.0.0.1:$((27941 + o))" \
      --amqp-addr "127.0.0.1:$((25671 + i + o))" --grpc-addr "127.0.0.1:$((25680 + i + o))" --raft-addr "127.0.0.1:$(raftport "$i")" \
      --gossip-addr "127.0.0.1:$((27940 + i + o))" --http-addr "127.0.0.1:$((25694 + i + o))" --management-addr "" ${NODE_ARGS:-} >>"n$i.log" 2>&1 &
    echo $! >"n$i.pid"
  done)
fi
cg() {
  if [ -d /sys/fs/cgroup/cpu ]; then echo "/sys/fs/cgroup/cpu/raftmq-$o-n$1"; else echo "/sys/fs/cgroup/raftmq-$o-n$1"; fi
}
for i in $(seq 1 "$n"); do
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
trap 'for i in $(seq 1 "$n"); do rmdir "$(cg "$i")" 2>/dev/null || true; done' EXIT
IFS=, read -r -a u <<<"$urls"
# Every node serves (a publish confirmed on each), and the queue groups,
# when asked for, run and place queues: a queue declared now lands in one.
for i in $(seq 0 $((n - 1))); do
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
cpu() { for i in $(seq 1 "$n"); do awk '{print $14 + $15}' "/proc/$(cat "$DIR/n$i.pid")/stat"; done; }
read -r -d '' -a before < <(cpu) || true
pids=()
for q in $(seq 1 "$queues"); do
  # The publisher on one node, the consumer on the next.
  a=${u[$(((q - 1) % n))]} b=${u[$((q % n))]}
  "$DIR/raftmq-perf" -uri "$a,$b" -producers 1 -consumers 1 -duration "$duration" -queue "scale-$q" ${QUEUE_ARGS:+-queue-args "$QUEUE_ARGS"} >"$DIR/scale-$q.out" 2>&1 &
  pids+=($!)
done
# Where the queues are, and each group's leader and members as its
# members see them (a node lists only the groups it runs).
ctl() { "$DIR/raftmqctl" -n "127.0.0.1:$((25680 + $1 + o))" --data-dir "$DIR/n$1" -q "${@:2}"; }
(sleep 5 && { ctl 1 list_queues name raft_group 2>&1 || true
  for i in $(seq 1 "$n"); do ctl "$i" --no-table-headers list_groups name leader members 2>&1 || true; done | awk '$2 != "" && !seen[$1]++'; } >"$DIR/where.txt") &
where=$!
wait "${pids[@]}"
read -r -d '' -a after < <(cpu) || true
wait "$where" || true
cat "$DIR/where.txt" >&2
hz=$(getconf CLK_TCK)
total=0
for q in $(seq 1 "$queues"); do
  r=$(grep -o '"consumed_in_run":[0-9]*' "$DIR/scale-$q.out" | cut -d: -f2)
  s=$(grep -o '"seconds":[0-9.]*' "$DIR/scale-$q.out" | cut -d: -f2)
  total=$(echo "$total + $r / $s" | bc -l)
done
line=$(printf 'consumed/s %.0f; cpu-s' "$total")
for i in $(seq 1 "$n"); do
  line+=$(printf ' n%d %.1f' "$i" "$(echo "(${after[$((i - 1))]} - ${before[$((i - 1))]}) / $hz" | bc -l)")
done
echo "$line"
cmd/raftmq-perf/scripts/three-nodes.sh stop
