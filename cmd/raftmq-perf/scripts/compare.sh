#!/usr/bin/env bash
# Runs the performance targets of docs/performance.md against three raftmq
# nodes, then against three RabbitMQ nodes with quorum queues, one system at
# a time on the same machine, and prints each run's JSON line.
#   cmd/raftmq-perf/scripts/compare.sh [raftmq|rabbitmq]... > results.jsonl
# DURATION (default 25s) sets the length of the throughput runs; ONLY (an
# extended regular expression) keeps the runs whose names match it
# (backlog-* is one run, busy-* one, kill-leader another). DIR and PORTS go to
# three-nodes.sh (raftmq); RABBITMQ_DIR is the RabbitMQ nodes' directory.
# Every run but kill-leader passes the nodes' process ids to raftmq-perf
# (-pids), so its JSON line has the brokers' CPU seconds per 100,000
# messages (cpu_s_per_100k) and, for the backlog fill, their anonymous
# resident memory per queued message (bytes_per_queued).
set -euo pipefail
cd "$(dirname "$0")/../../.."
scripts=cmd/raftmq-perf/scripts
duration=${DURATION:-25s}
raftmq_dir=${DIR:-/tmp/raftmq-perf}
rabbitmq_dir=${RABBITMQ_DIR:-/tmp/rabbitmq-perf}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go build -o "$out/raftmq-perf" ./cmd/raftmq-perf

# run SYSTEM NAME ARGS...: one raftmq-perf run, its JSON line tagged.
run() {
  local system=$1 name=$2
  shift 2
  "$out/raftmq-perf" -interval 5s "$@" >"$out/run.txt" 2>&1 || { cat "$out/run.txt" >&2; return 1; }
  line "$system" "$name" "$out/run.txt"
}
# line SYSTEM NAME FILE: the JSON line raftmq-perf wrote to FILE, tagged.
line() {
  printf '{"system":"%s","run":"%s","result":%s}\n' "$1" "$2" "$(grep '^{' "$3" | tail -1)"
}

# up SYSTEM: a fresh cluster (no backlog left by the run before), its URLs.
up() {
  if [ "$1" = raftmq ]; then DIR=$raftmq_dir "$scripts/three-nodes.sh"; else DIR=$rabbitmq_dir "$scripts/rabbitmq-three-nodes.sh"; fi
}
# pids SYSTEM: the nodes' process ids (RabbitMQ: the beam processes), comma-separated.
pids() {
  if [ "$1" = raftmq ]; then
    awk 1 "$raftmq_dir"/n{1,2,3}.pid | paste -sd,
  else
    # RabbitMQ writes its pid files without a newline.
    awk 1 "$rabbitmq_dir"/n{1,2,3}/pid | paste -sd,
  fi
}
# leader_pid SYSTEM: the process of the node that leads (raftmq: the raft
# leader; RabbitMQ: the first node, where the queue was declared and so
# where its quorum queue's leader starts).
leader_pid() {
  if [ "$1" = raftmq ]; then
    for i in 1 2 3; do
      if curl -s "http://127.0.0.1:$((25694 + i + ${PORTS:-0}))/metrics" | grep -q 'raftmq_raft_state{state="Leader"} 1'; then
        cat "$raftmq_dir/n$i.pid"; return
      fi
    done
    echo "no raftmq leader" >&2; return 1
  fi
  cat "$rabbitmq_dir/n1/pid"
}
wanted() { [[ $1 =~ ${ONLY:-.} ]]; }
# rss SYSTEM NAME: each node's anonymous resident memory (KiB), a JSON line.
rss() {
  local p list=
  for p in $(pids "$1" | tr , ' '); do
    list+="${list:+,}$(awk '/^RssAnon:/ {print $2}' "/proc/$p/status")"
  done
  printf '{"system":"%s","run":"%s","result":{"rss_anon_kib":[%s]}}\n' "$1" "$2" "$list"
}
down() {
  if [ "$1" = raftmq ]; then DIR=$raftmq_dir "$scripts/three-nodes.sh" stop; else DIR=$rabbitmq_dir "$scripts/rabbitmq-three-nodes.sh" stop; fi
  sleep 2
}

systems=("$@")
[ ${#systems[@]} -gt 0 ] || systems=(raftmq rabbitmq)
for s in "${systems[@]}"; do
  case $s in
    raftmq) args=() ;;
    rabbitmq) args=(-queue-args '{"x-queue-type":"quorum"}') ;;
    *) echo "unknown system $s" >&2; exit 2 ;;
  esac
  while read -r name extra; do
    wanted "$name" || continue
    uri=$(up "$s" </dev/null)
    # shellcheck disable=SC2086 # extra holds several flags
    run "$s" "$name" -uri "$uri" -pids "$(pids "$s")" -size 1024 -persistent -confirm 256 -prefetch 100 "${args[@]}" $extra </dev/null
    down "$s" </dev/null
  done <<RUNS
one-publisher -producers 1 -consumers 1 -duration $duration -queue c1
cpu-200k -producers 1 -consumers 1 -count 200000 -duration 10m -queue cc
four-publishers -producers 4 -consumers 1 -duration $duration -queue c4
sixteen-publishers -producers 16 -consumers 1 -duration $duration -queue c16
four-publishers-20k -producers 4 -consumers 1 -rate 5150 -duration $duration -queue c4r
paced-1000 -producers 1 -consumers 1 -rate 1000 -duration $duration -queue cp
expiry-100k -mode expiry -count 100000 -ttl 2s -queue ce
expiry-100k-head -mode expiry -count 100000 -ttl 2s -head-ttl 10s -queue ch
expiry-100k-10k -mode expiry -count 100000 -ttl 2s -rate 10000 -queue cer
expiry-100k-head-10k -mode expiry -count 100000 -ttl 2s -head-ttl 10s -rate 10000 -queue chr
RUNS
  # Behind a backlog: BACKLOG (default 500,000) persistent 1 KiB messages
  # wait in one queue (two publishers, no consumer), then a paced
  # publisher and its consumer run on another queue; each node's
  # anonymous resident memory is read with the backlog in place.
  if wanted backlog; then
    uri=$(up "$s" </dev/null)
    run "$s" backlog-fill -uri "$uri" -pids "$(pids "$s")" -size 1024 -persistent -confirm 256 -producers 2 -consumers 0 -count $((${BACKLOG:-500000} / 2)) -duration 30m -queue backlog "${args[@]}" </dev/null
    rss "$s" backlog-rss
    run "$s" paced-behind-backlog -uri "$uri" -pids "$(pids "$s")" -size 1024 -persistent -confirm 256 -prefetch 100 -producers 1 -consumers 1 -rate 1000 -duration "$duration" -queue cpb "${args[@]}" </dev/null
    down "$s" </dev/null
  fi
  # A busy cluster, no backlog: BUSY_SIZE (default 8 KiB) persistent
  # messages at 1,000/s through one queue with its consumer while a paced
  # 1,000/s queue of 1 KiB runs beside it, BUSY_DURATION (default 40s).
  # busy-paced is the paced queue's line (its tail is the target), busy-big
  # the other's.
  if wanted busy; then
    uri=$(up "$s" </dev/null)
    p=$(pids "$s")
    "$out/raftmq-perf" -interval 5s -uri "$uri" -pids "$p" -size "${BUSY_SIZE:-8192}" -persistent -confirm 256 -prefetch 100 -rate 1000 -duration "${BUSY_DURATION:-40s}" -queue big "${args[@]}" >"$out/big.txt" 2>&1 </dev/null &
    big=$!
    run "$s" busy-paced -uri "$uri" -pids "$p" -size 1024 -persistent -confirm 256 -prefetch 100 -rate 1000 -duration "${BUSY_DURATION:-40s}" -queue paced "${args[@]}" </dev/null
    wait "$big" || { cat "$out/big.txt" >&2; exit 1; }
    line "$s" busy-big "$out/big.txt"
    down "$s" </dev/null
  fi
  wanted kill-leader || continue
  # Killing the leader: the queue is declared on the first node, two
  # publishers on the others publish for 16 s and the leading node is
  # killed after 8; max_confirm_gap_ms is how long confirms stopped.
  uri=$(up "$s" </dev/null)
  "$out/raftmq-perf" -uri "${uri%%,*}" -producers 1 -consumers 0 -count 1 -queue kl "${args[@]}" >/dev/null </dev/null
  victim=$(leader_pid "$s")
  (sleep 8; kill -9 "$victim") &
  run "$s" kill-leader -uri "${uri#*,}" -size 1024 -persistent -confirm 256 -producers 2 -consumers 0 -duration 16s -queue kl "${args[@]}" </dev/null || true
  wait
  down "$s" </dev/null
done
