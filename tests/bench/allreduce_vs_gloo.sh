#!/bin/sh
# All-reduce beside torch.distributed's gloo backend, in one run on one machine:
# ddp-bench and ../shared/anchors/gloo_allreduce.py take turns, ROUNDS times each, and
# each keeps its best time per size (the machine is shared and noisy; best-of is fair to both).
#
#   tests/bench/allreduce_vs_gloo.sh BUILD_DIR [WORLD] [ROUNDS] [ANCHORS_DIR]
#
# Needs Debian's python3-torch. Prints one table: bytes, both times and busbw, and the ratios.
set -eu
build=$1
world=${2:-2}
rounds=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
anchors=${4:-$here/../../../shared/anchors}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

for i in $(seq "$rounds"); do
  /usr/bin/python3 "$anchors/gloo_allreduce.py" "$world" | grep -v '^#' >> "$out/gloo"
  "$build/bin/ddp-bench" all_reduce -n "$world" -b 4 -e 64M -f 4 | grep -v '^#' >> "$out/ddp"
done

# gloo rows: bytes time_us algbw busbw; ddp-bench rows: bytes count type redop root time_us algbw busbw ...
awk -v world="$world" -v rounds="$rounds" '
  FNR == 1 { file++ }
  file == 1 { if (!($1 in g) || $2 < g[$1]) { g[$1] = $2; gb[$1] = $4 } }
  file == 2 { if (!($1 in d) || $6 < d[$1]) { d[$1] = $6; db[$1] = $8 } }
  END {
    printf "# all_reduce f32 sum, world %d, best of %d rounds each\n", world, rounds
    printf "%12s %12s %12s %10s %12s %12s %10s\n", "bytes", "gloo_us", "ddp_us", "time_x", "gloo_busbw", "ddp_busbw", "busbw_x"
    n = 0; for (s in d) sizes[++n] = s + 0
    for (i = 2; i <= n; i++) for (j = i; j > 1 && sizes[j-1] > sizes[j]; j--) { t = sizes[j]; sizes[j] = sizes[j-1]; sizes[j-1] = t }
    for (i = 1; i <= n; i++) {
      s = sizes[i]
      if (!(s in g)) continue
      # same bytes on both sides: the busbw ratio is the inverse time ratio, exact even where busbw rounds to 0
      printf "%12d %12.1f %12.1f %10.2f %12.3f %12.3f %10.2f\n", s, g[s], d[s], d[s] / g[s], gb[s], db[s], g[s] / d[s]
    }
    print "# time_x = ddp time / gloo time (lower is better); busbw_x = ddp busbw / gloo busbw (higher is better)"
  }' "$out/gloo" "$out/ddp"
