#!/bin/sh
# What the data plane's authentication costs: ddp-bench all_reduce over ZeroMQ (world 2,
# one host) with the ranks' data sockets on Unix sockets (the guard asks the kernel who
# connects; nothing is encrypted) and on loopback TCP (CURVE: every byte encrypted), and,
# given a BASELINE build from before the guard, the same two without it. The runs take
# turns, ROUNDS times each; each cell is best/median of the rounds.
#
#   tests/bench/data_plane_auth.sh BUILD_DIR [ROUNDS] [BASELINE_BUILD_DIR]
set -eu
build=$1
rounds=${2:-5}
. "$(cd "$(dirname "$0")" && pwd)/stats.sh"
baseline=${3:-}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

bench() { # build [endpoint]: rows "bytes time_us busbw"; no endpoint: Unix sockets in the launch's private directory
  if [ -n "${2:-}" ]; then export DDP_DATA_ENDPOINT="$2"; else unset DDP_DATA_ENDPOINT; fi
  DDP_TRANSPORT=zmq "$1/bin/ddp-bench" all_reduce -n 2 -b 4 -e 64M -f 16 | awk '!/^#/ { print $1, $6, $8 }'
}
for i in $(seq "$rounds"); do
  bench "$build" | sed 's/^/ipc /' >> "$out"
  bench "$build" 'tcp://127.0.0.1:*' | sed 's/^/curve /' >> "$out"
  if [ -n "$baseline" ]; then
    bench "$baseline" | sed 's/^/ipc0 /' >> "$out"
    bench "$baseline" 'tcp://127.0.0.1:*' | sed 's/^/tcp0 /' >> "$out"
  fi
done
awk -v rounds="$rounds" "$MEDIAN_AWK"'
  { key = $1 SUBSEP $2; times[key] = times[key] " " $3
    if (!(key in best) || $3 < best[key]) best[key] = $3
    if ($1 == "ipc") sizes[$2] = 1 }
  function cell(tool, s) { k = tool SUBSEP s; return (k in best) ? sprintf("%.1f/%.1f", best[k], median(times[k])) : "-" }
  function ratio(a, b, s) { return ((a SUBSEP s) in best && (b SUBSEP s) in best) ? sprintf("%.2f", best[a SUBSEP s] / best[b SUBSEP s]) : "-" }
  END {
    printf "\n# all_reduce f32 sum over ZeroMQ, world 2, %d rounds alternating; times in us, best/median\n", rounds
    printf "| bytes | ipc, guarded | tcp, CURVE | ipc, before the guard | tcp, before (plain) | guarded/before (ipc) | CURVE/plain (tcp) | CURVE/ipc |\n"
    printf "|---|---|---|---|---|---|---|---|\n"
    n = 0; for (s in sizes) list[++n] = s + 0
    for (i = 2; i <= n; i++) for (j = i; j > 1 && list[j-1] > list[j]; j--) { t = list[j]; list[j] = list[j-1]; list[j-1] = t }
    for (i = 1; i <= n; i++) {
      s = list[i]
      printf "| %d | %s | %s | %s | %s | %s | %s | %s |\n", s, cell("ipc", s), cell("curve", s), cell("ipc0", s),
        cell("tcp0", s), ratio("ipc", "ipc0", s), ratio("curve", "tcp0", s), ratio("curve", "ipc", s)
    }
    print "# ratios are of the best times: above 1 is slower."
  }' "$out"
