#!/bin/sh
# How a job's cost grows with its world on one host: the wall time of
#   ddp-run -n N -- member --barriers 3
# (start N processes, form the job at a private ddpd, init: the transport agreed and the
# host's shared memory handed over, three barriers, leave), for N from 16 to MAX, ROUNDS
# times each, the sizes taking turns. Each row: best and median seconds, the median per
# rank, how many runs failed (any failure is a bug: a false death, a lost coordinator),
# and ddpd's stall warnings (members silent past the liveness window, alive: starved).
#
#   tests/bench/scale.sh BUILD_DIR [ROUNDS] [MAX]
set -eu
build=$1
rounds=${2:-3}
. "$(cd "$(dirname "$0")" && pwd)/stats.sh"
max=${3:-1024}
out=$(mktemp)
log=$(mktemp)
trap 'rm -f "$out" "$log"' EXIT

sizes=""
n=16
while [ "$n" -le "$max" ]; do
  sizes="$sizes $n"
  n=$((n * 2))
done
for i in $(seq "$rounds"); do
  for n in $sizes; do
    start=$(date +%s%N)
    if "$build/bin/ddp-run" -n "$n" -- "$build/bin/member" --barriers 3 > "$log" 2>&1; then rc=0; else rc=$?; fi
    end=$(date +%s%N)
    stalls=$(grep -c "stalled: silent" "$log" || true)
    echo "$n $(((end - start) / 1000000)) $rc $stalls" >> "$out"
    if [ "$rc" -ne 0 ]; then
      echo "# -n $n failed ($rc):" >&2
      grep -v "barrier .* ok\|joined rank\|finalized\|stalled: silent\|answers again" "$log" | head -5 >&2
    fi
  done
done
awk -v rounds="$rounds" "$MEDIAN_AWK"'
  { $2 /= 1000; times[$1] = times[$1] " " $2; if (!($1 in best) || $2 < best[$1]) best[$1] = $2
    failed[$1] += $3 != 0; stalls[$1] += $4; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
  END {
    printf "\n# ddp-run -n N -- member --barriers 3, %d rounds alternating; seconds, best/median\n", rounds
    printf "%6s %15s %14s %7s %8s\n", "ranks", "wall s", "ms per rank", "failed", "stalls"
    for (i = 1; i <= n; i++) { s = order[i]; m = median(times[s])
      printf "%6d %15s %14.2f %7d %8d\n", s, sprintf("%.2f/%.2f", best[s], m), 1000 * m / s, failed[s], stalls[s] }
  }' "$out"
