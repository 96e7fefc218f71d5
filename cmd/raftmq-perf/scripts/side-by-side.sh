#!/usr/bin/env bash
# Compares this checkout's raftmq with another checkout's (a release) under
# the same load of the machine: both three-node clusters run at once, and
# one raftmq-perf (this checkout's) drives both with the one-publisher
# flags of compare.sh, started together. One after the other, a busy
# machine's load changes between the two runs more than they differ.
#   cmd/raftmq-perf/scripts/side-by-side.sh OTHER_CHECKOUT [ROUNDS] > results.jsonl
# Each round prints two JSON lines, "this" and "other". DIR (default
# /tmp/raftmq-side) holds both clusters; PORTS (default 3000) moves this
# checkout's ports up by PORTS and the other's by PORTS+1000 (keep them
# below the ephemeral range, from 32768: three-nodes.sh's highest port is
# 27943+PORTS). DURATION (default 25s) is each run's length.
set -euo pipefail
other=$(cd "${1:?usage: side-by-side.sh OTHER_CHECKOUT [ROUNDS]}" && pwd)
rounds=${2:-3}
cd "$(dirname "$0")/../../.."
scripts=cmd/raftmq-perf/scripts
dir=${DIR:-/tmp/raftmq-side}
ports=${PORTS:-3000}
mkdir -p "$dir"
go build -o "$dir/raftmq-perf" ./cmd/raftmq-perf

declare -A src=([this]=$PWD [other]=$other) off=([this]=$ports [other]=$((ports + 1000)))
# nodes WHICH ARGS...: WHICH's three-nodes.sh, from its own checkout.
nodes() {
  local w=$1
  shift
  (cd "${src[$w]}" && DIR="$dir/$w" PORTS=${off[$w]} "$scripts/three-nodes.sh" "$@")
}
trap 'nodes this stop; nodes other stop' EXIT
for r in $(seq 1 "$rounds"); do
  declare -A uri
  for w in this other; do uri[$w]=$(nodes "$w" </dev/null); done
  load=$(cut -d' ' -f1 /proc/loadavg)
  for w in this other; do
    "$dir/raftmq-perf" -interval 5s -uri "${uri[$w]}" -pids "$(awk 1 "$dir/$w"/n{1,2,3}.pid | paste -sd,)" \
      -size 1024 -persistent -confirm 256 -prefetch 100 -producers 1 -consumers 1 -duration "${DURATION:-25s}" -queue c1 \
      >"$dir/$w.txt" 2>&1 </dev/null &
  done
  wait
  for w in this other; do
    printf '{"round":%d,"build":"%s","load":"%s","result":%s}\n' "$r" "$w" "$load" "$(grep '^{' "$dir/$w.txt" | tail -1)"
  done
  for w in this other; do nodes "$w" stop; done
done
