#!/bin/sh
# ddp-worker beside the PyTorch anchor (../shared/anchors/torch_train.py), on Fashion-MNIST,
# in one run on one machine, both with one BLAS thread per process. Each configuration
# runs ROUNDS times, alternating with its peer, and keeps its best samples/s (the machine
# is shared and noisy); accuracy comes from the last round.
#
#   tests/bench/train_vs_torch.sh BUILD_DIR [ROUNDS] [ANCHORS_DIR]
#
# Needs Debian's python3-torch and dataset-fashion-mnist.
set -eu
build=$1
rounds=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
anchors=${3:-$here/../../../shared/anchors}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

ours() { # world model epochs mode
  "$build/bin/ddp-run" -n "$1" -- ddp-worker --model "$2" --epochs "$3" --mode "$4" | grep '^\[rank 0\] RESULT' | sed 's/^\[rank 0\] //'
}
theirs() { # world model epochs sync
  /usr/bin/python3 "$anchors/torch_train.py" "$1" "$2" "$3" "$4" 2>/dev/null | grep '^RESULT'
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
best() { sort -n | tail -1; }

# speed: mlp, one epoch, 1 and 2 workers
for i in $(seq "$rounds"); do
  ours 1 mlp 1 ddp >> "$out/ours1"
  theirs 1 mlp 1 none >> "$out/torch1"
  ours 2 mlp 1 ddp >> "$out/ours2"
  theirs 2 mlp 1 ddp >> "$out/torch2"
done
o1=$(field samples_per_s < "$out/ours1" | best); t1=$(field samples_per_s < "$out/torch1" | best)
o2=$(field samples_per_s < "$out/ours2" | best); t2=$(field samples_per_s < "$out/torch2" | best)

# accuracy: linear 10 epochs and mlp 5 epochs, 2 workers
la=$(ours 2 linear 10 ddp | field test_acc)
ma=$(ours 2 mlp 5 ddp | field test_acc)
ta=$(theirs 2 mlp 5 ddp | field test_acc)

echo "# Fashion-MNIST, global batch 128, SGD lr 0.01 momentum 0.5, 1 BLAS thread per process"
printf "%-34s %12s %12s %8s\n" "run" "ddp-worker" "PyTorch" "ratio"
printf "%-34s %12s %12s %8.2f\n" "mlp, 1 worker, samples/s" "$o1" "$t1" "$(echo "$o1 / $t1" | bc -l)"
printf "%-34s %12s %12s %8.2f\n" "mlp, 2 workers ddp, samples/s" "$o2" "$t2" "$(echo "$o2 / $t2" | bc -l)"
printf "%-34s %12s %12s %8.2f\n" "mlp, 2 workers / 1 worker (ours)" "$o2" "$o1" "$(echo "$o2 / $o1" | bc -l)"
printf "%-34s %12s %12s\n" "linear, 2 workers, 10 epochs, acc" "$la" "0.838 (seed)"
printf "%-34s %12s %12s %8.4f\n" "mlp, 2 workers, 5 epochs, acc" "$ma" "$ta" "$(echo "$ma - $ta" | bc -l)"
