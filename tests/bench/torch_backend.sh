#!/bin/sh
# PyTorch on the backend "ddpd" (torch_ddpd) beside PyTorch's own gloo, in one run on one
# machine: the seed's DDP training (tests/bench/torch_backend.py: mlp on Fashion-MNIST,
# global batch 128, 2 processes, one thread each) and all_reduce from Python, 4 B to
# 64 MiB, world 2. Both backends start the same way (ddp-run, env://); the backends take
# turns, ROUNDS times each, and each figure is the best and the median of its rounds.
#
#   tests/bench/torch_backend.sh BUILD_DIR [ROUNDS]
#
# Needs the build's torch_ddpd (python3-torch, libtorch-dev), bc and dataset-fashion-mnist.
set -eu
build=$(cd "$1" && pwd)
rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/stats.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONPATH="$build/python"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() { # backend what arg: rank 0's lines
  "$build/bin/ddp-run" -n 2 -- /usr/bin/python3 "$here/torch_backend.py" "$@" 2>/dev/null | sed -n 's/^\[rank 0\] //p'
}
for i in $(seq "$rounds"); do
  for b in ddpd gloo; do
    run $b train 1 | sed -n 's/.* samples_per_s=\([^ ]*\).*/\1/p' >> "$out/train.$b"
    run $b all_reduce $((64 << 20)) | awk -v b=$b '{ print b, $1, $2, $4 }' >> "$out/rows"
  done
done
d=$(stats < "$out/train.ddpd"); g=$(stats < "$out/train.gloo")
echo "# PyTorch 1.13 DDP, mlp on Fashion-MNIST, 1 epoch, global batch 128, 2 processes, 1 thread each;"
echo "# $rounds rounds alternating, best/median samples/s"
echo "| backend | samples/s | ddpd/gloo (bests) | ddpd/gloo (medians) |"
echo "|---|---|---|---|"
echo "| gloo | $g | | |"
echo "| ddpd | $d | $(ratio "$(echo "$d" | first)" "$(echo "$g" | first)") | $(ratio "$(echo "$d" | cut -d/ -f2)" "$(echo "$g" | cut -d/ -f2)") |"
# rows: backend bytes time_us busbw
awk -v rounds="$rounds" "$MEDIAN_AWK"'
  { k = $1 SUBSEP $2; times[k] = times[k] " " $3; bws[k] = bws[k] " " $4
    if (!(k in best) || $3 < best[k]) { best[k] = $3; bestbw[k] = $4 }
    if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
  END {
    printf "\n# torch.distributed.all_reduce, float32 SUM, world 2, from Python; %d rounds alternating, best/median\n", rounds
    printf "| bytes | gloo us | ddpd us | gloo busbw GB/s | ddpd busbw GB/s | ddpd/gloo busbw (bests) | (medians) |\n"
    printf "|---|---|---|---|---|---|---|\n"
    for (i = 1; i <= n; i++) {
      s = order[i]; g = "gloo" SUBSEP s; d = "ddpd" SUBSEP s
      printf "| %d | %.1f/%.1f | %.1f/%.1f | %.3f/%.3f | %.3f/%.3f | %s | %s |\n", s,
        best[g], median(times[g]), best[d], median(times[d]), bestbw[g], median(bws[g]), bestbw[d], median(bws[d]),
        (bestbw[g] > 0 ? sprintf("%.1f", bestbw[d] / bestbw[g]) : "-"),
        (median(bws[g]) > 0 ? sprintf("%.1f", median(bws[d]) / median(bws[g])) : "-")
    }
  }' "$out/rows"
