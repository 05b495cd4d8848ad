#!/bin/sh
# ddp-worker beside the PyTorch anchor (../shared/anchors/torch_train.py), on Fashion-MNIST,
# in one run on one machine, every process with one BLAS thread. Each configuration runs
# ROUNDS times, the configurations taking turns, and each figure is the best and the median
# of its rounds (the machine is shared and noisy); accuracy comes from separate longer runs.
# Also: the all-reduce inside ddp training (comm time per step, from --metrics) beside
# ddp-bench's all-reduce of the same size in the same run: as training sees it, and its
# own time (less the time it waited for the other rank to arrive, peer_wait_s). And two
# 1-worker jobs at once: the most two workers can do on this machine's two cores.
#
#   tests/bench/train_vs_torch.sh BUILD_DIR [ROUNDS] [ANCHORS_DIR]
#
# Needs python3-torch, bc and dataset-fashion-mnist (deploy/install-deps.sh --bench).
set -eu
build=$1
rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
anchors=${3:-$here/../../../shared/anchors}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
params=535818 # mlp 784-512-256-10: one 25 MiB bucket, so one all-reduce of this many floats a step

ours() { # world model epochs mode [metrics]: rank 0's RESULT line
  "$build/bin/ddp-run" -n "$1" -- ddp-worker --model "$2" --epochs "$3" --mode "$4" ${5:+--metrics "$5"} |
    grep '^\[rank 0\] RESULT' | sed 's/^\[rank 0\] //'
}
theirs() { # world model epochs sync
  /usr/bin/python3 "$anchors/torch_train.py" "$1" "$2" "$3" "$4" 2>/dev/null | grep '^RESULT'
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
. "$here/stats.sh"

# PyTorch runs the same OpenBLAS, which picks its kernels by the CPU's model: where it does
# not know the model, ddp-worker picks them by the CPU's features (README, "BLAS kernels")
# and PyTorch would run the generic ones. Both run ddp-worker's, so the comparison is of
# the rest.
kernels=$("$build/bin/ddp-run" -n 1 -- ddp-worker --model linear --steps 1 | sed -n 's/.*OpenBLAS \([^ ]*\) kernels.*/\1/p')
[ -n "${OPENBLAS_CORETYPE:-}" ] || [ -z "$kernels" ] || export OPENBLAS_CORETYPE="$kernels"

for i in $(seq "$rounds"); do
  ours 1 mlp 1 ddp >> "$out/ours1"
  # Two 1-worker jobs at once, each with its ddpd: no communication, both cores busy. Their
  # sum is what two workers could reach on this machine if syncing cost nothing.
  ours 1 mlp 1 ddp > "$out/pair_a" &
  ours 1 mlp 1 ddp > "$out/pair_b"
  wait
  echo "$(field samples_per_s < "$out/pair_a") + $(field samples_per_s < "$out/pair_b")" | bc -l >> "$out/pair.n"
  theirs 1 mlp 1 none >> "$out/torch1"
  rm -f "$out/m.jsonl"
  ours 2 mlp 1 ddp "$out/m.jsonl" >> "$out/ddp"
  /usr/bin/python3 -c 'import json, sys
e = [x for x in map(json.loads, open(sys.argv[1])) if x["type"] == "epoch"][-1]  # comm ms a step, whole run
print("%.4f %.4f" % (e["comm_s"] / e["step"] * 1000, (e["comm_s"] - e["peer_wait_s"]) / e["step"] * 1000))' \
    "$out/m.jsonl" > "$out/comm_line"
  cut -d' ' -f1 "$out/comm_line" >> "$out/comm_ms"
  cut -d' ' -f2 "$out/comm_line" >> "$out/own_ms"
  "$build/bin/ddp-bench" all_reduce -n 2 -b $((params * 4)) -e $((params * 4)) | awk '!/^#/ { printf "%.4f\n", $6 / 1000 }' >> "$out/bench_ms"
  "$build/bin/ddp-bench" all_reduce -n 2 -b $((params * 4)) -e $((params * 4)) --alloc | awk '!/^#/ { printf "%.4f\n", $6 / 1000 }' >> "$out/alloc_ms"
  "$build/bin/ddp-bench" all_reduce -n 2 -b $((params * 4)) -e $((params * 4)) --alloc --cold 16 | awk '!/^#/ { printf "%.4f\n", $6 / 1000 }' >> "$out/cold_ms"
  theirs 2 mlp 1 ddp >> "$out/torch2"
  ours 2 mlp 1 dp >> "$out/dp"
  ours 2 mlp 1 ps >> "$out/ps"
done
for f in ours1 torch1 ddp torch2 dp ps; do
  field samples_per_s < "$out/$f" > "$out/$f.n"
  stats < "$out/$f.n" > "$out/$f.s"
done
stats < "$out/pair.n" > "$out/pair.s"
o1=$(cat "$out/ours1.s"); t1=$(cat "$out/torch1.s"); d=$(cat "$out/ddp.s"); t2=$(cat "$out/torch2.s"); pair=$(cat "$out/pair.s")
dp=$(cat "$out/dp.s"); ps=$(cat "$out/ps.s")
comm=$(stats min < "$out/comm_ms"); own=$(stats min < "$out/own_ms"); bench=$(stats min < "$out/bench_ms"); alloc=$(stats min < "$out/alloc_ms"); cold=$(stats min < "$out/cold_ms")

# accuracy: linear 10 epochs and mlp 5 epochs, 2 workers
la=$(ours 2 linear 10 ddp | field test_acc)
ma=$(ours 2 mlp 5 ddp | field test_acc)
ta=$(theirs 2 mlp 5 ddp | field test_acc)

echo "# Fashion-MNIST, mlp, global batch 128, SGD lr 0.01 momentum 0.5, 1 BLAS thread a process;"
echo "# $rounds rounds alternating, each figure best/median; ratios of the bests, and of each round's pair (median,"
echo "# lowest-highest); OpenBLAS's ${OPENBLAS_CORETYPE:-own} kernels for both"
echo "| run | samples/s | against | ratio of the bests | ratio per round |"
echo "|---|---|---|---|---|"
row() { # label figure against-label against-figure file against-file
  echo "| $1 | $2 | $3: $4 | $(ratio "$(echo "$2" | first)" "$(echo "$4" | first)") | $(paired "$out/$5.n" "$out/$6.n") |"
}
row "ddp-worker, 1 worker" "$o1" "PyTorch, 1 process" "$t1" ours1 torch1
row "ddp-worker, 2 workers, ddp" "$d" "PyTorch DDP (gloo), 2 processes" "$t2" ddp torch2
row "ddp-worker, 2 workers, ddp" "$d" "ddp-worker, 1 worker" "$o1" ddp ours1
row "two 1-worker jobs at once (sum)" "$pair" "ddp-worker, 1 worker" "$o1" pair ours1
row "ddp-worker, 2 workers, ddp" "$d" "two 1-worker jobs at once (sum)" "$pair" ddp pair
row "ddp-worker, 2 workers, dp" "$dp" "ddp-worker, 2 workers, ddp" "$d" dp ddp
row "ddp-worker, 2 workers, ps" "$ps" "ddp-worker, 2 workers, ddp" "$d" ps ddp
echo
echo "| all-reduce of $((params * 4)) bytes, world 2 | ms (best/median) |"
echo "|---|---|"
echo "| inside ddp training (comm_s / steps, rank 0) | $comm |"
echo "| inside ddp training, from the other rank's arrival ((comm_s - peer_wait_s) / steps) | $own |"
echo "| ddp-bench, same size, same run | $bench |"
echo "| ddp-bench --alloc (the input in place, as training's), same size | $alloc |"
echo "| ddp-bench --alloc --cold 16 (16 MiB written between calls, as a step's compute does) | $cold |"
echo "| training / ddp-bench, the bests | $(ratio "$(echo "$comm" | first)" "$(echo "$bench" | first)") |"
echo "| training from the arrival / ddp-bench, the bests | $(ratio "$(echo "$own" | first)" "$(echo "$bench" | first)") |"
echo "| the same, the medians | $(ratio "$(echo "$own" | cut -d/ -f2)" "$(echo "$bench" | cut -d/ -f2)") |"
echo "| training from the arrival / ddp-bench, per round | $(paired "$out/own_ms" "$out/bench_ms") |"
echo
echo "| accuracy, 2 workers | ddp-worker | PyTorch |"
echo "|---|---|---|"
echo "| linear, 10 epochs | $la | 0.838 (seed) |"
echo "| mlp, 5 epochs | $ma | $ta |"
