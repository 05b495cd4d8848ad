#!/bin/bash
# The GPU checks, in one run of a few minutes on a machine with an NVIDIA GPU, ending in
# one summary: the CUDA backend's tests, GPU training against the CPU's, a short benchmark
# (mlp on one GPU: 1 worker, 2 workers ddp and dp: samples/s and device memory per rank)
# and cuBLAS SGEMM TFLOP/s against the card's peak.
#
#   tests/gpu/run.sh [BUILD_DIR]
#
# BUILD_DIR (default build-gpu) is a CUDA build: tests/gpu/bundle.sh makes one, packed in
# build-bundle/ for a machine without the Debian packages (unpacked here when build-gpu/
# is missing); elsewhere `cmake -S . -B build-gpu -DDDP_CUDA=ON && cmake --build
# build-gpu` does. Exits 77 without a GPU.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${1:-}" ] && [ ! -d "$repo/build-gpu" ] && [ -f "$repo/build-bundle/ddp-gpu.tgz" ]; then
  tar -C "$repo" -xzf "$repo/build-bundle/ddp-gpu.tgz"
fi
build=$(cd "${1:-$repo/build-gpu}" && pwd) || exit 1
data=/usr/share/datasets/fashion-mnist
[ -d "$build/fashion-mnist" ] && data=$build/fashion-mnist
[ -d "$build/deps-lib" ] && export LD_LIBRARY_PATH="$build/deps-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -f "$build/source-dir" ]; then # a bundle: its absolute paths lead here
  src=$(cat "$build/source-dir")
  if [ "$src" != "$repo" ] && [ ! -e "$src" ]; then
    mkdir -p "$(dirname "$src")" && ln -s "$repo" "$src"
  fi
fi
export OPENBLAS_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
summary=()
say() { echo "== $*"; summary+=("$*"); }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | tail -1; }
worker() { # N args...: a job of N workers; prints rank 0's RESULT line
  local n=$1
  shift
  timeout 300 "$build/bin/ddp-run" -n "$n" -- ddp-worker --data "$data" "$@" 2>"$out/stderr" | grep '^\[rank 0\] RESULT'
}

if ! gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1) ||
  [ -z "$gpu" ]; then
  echo "run.sh: no GPU here (nvidia-smi found none)"
  exit 77
fi
say "GPU: $gpu"

# 1. The CUDA backend against the CPU backend, op by op.
if ctest --test-dir "$build" -R '^check_backend_cuda$' --output-on-failure >"$out/ctest" 2>&1 &&
  grep -q '100% tests passed' "$out/ctest" && ! grep -q 'Skipped' "$out/ctest"; then
  say "check_backend_cuda: passed"
else
  cat "$out/ctest"
  say "check_backend_cuda: FAILED (output above)"
fi

# 2. The same training on the GPU and the CPU: one epoch of mlp, 2 workers, ddp.
cpu=$(worker 2 --model mlp --epochs 1 --mode ddp --device cpu)
gpu_run=$(worker 2 --model mlp --epochs 1 --mode ddp --device cuda:0) || cat "$out/stderr"
say "mlp 1 epoch, 2 workers ddp: test accuracy CPU $(echo "$cpu" | field test_acc), GPU $(echo "$gpu_run" | field test_acc)"
for mode in dp ps; do
  r=$(worker 2 --model mlp --steps 50 --mode "$mode" --device cuda:0) || cat "$out/stderr"
  say "mlp 50 steps, 2 workers $mode on the GPU: ${r:+ok, test accuracy $(echo "$r" | field test_acc)}${r:-FAILED}"
done
# NCCL will not put two ranks on one GPU: one rank, to run the communicator's whole path.
r=$(worker 1 --model mlp --steps 50 --mode ddp --device cuda:0 --transport nccl) || cat "$out/stderr"
say "mlp 50 steps, 1 worker ddp --transport nccl: ${r:+ok, test accuracy $(echo "$r" | field test_acc)}${r:-FAILED}"
if "$build/bin/ddp-run" -n 1 -- ddp-worker --data "$data" --steps 1 --device cuda:99 >"$out/bad" 2>&1; then
  say "--device cuda:99: FAILED (it ran)"
else
  say "--device cuda:99: refused: $(grep -o 'no GPU 99[^;]*' "$out/bad" | head -1)"
fi

# 3. The benchmark: mlp on GPU 0, one epoch each; memory from every rank's metrics.
printf -v header "%-26s %10s  %s" "mlp on one GPU, 1 epoch" "samples/s" "per rank: peak tracked / device in use (MiB)"
summary+=("$header")
for cfg in "1 ddp" "2 ddp" "2 dp"; do
  set -- $cfg
  rm -f "$out"/m-*.jsonl
  r=$(worker "$1" --model mlp --epochs 1 --mode "$2" --device cuda:0 --metrics "$out/m-%r.jsonl") || cat "$out/stderr"
  mem=$(python3 - "$out" "$1" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
cells = []
for r in range(n):
    last = [json.loads(l) for l in open(f"{out}/m-{r}.jsonl") if '"epoch"' in l][-1]
    dev = next(iter(last["device_memory"].values()))
    cells.append("%.1f / %.0f" % (dev["peak_bytes"] / 2**20, dev.get("device_used_bytes", 0) / 2**20))
print(", ".join(cells))
PY
  )
  printf -v line "%-26s %10s  %s" "$1 worker(s), $2" "$(echo "$r" | field samples_per_s)" "$mem"
  summary+=("$line")
done

# 4. cuBLAS SGEMM against the card's FP32 peak.
"$build/bin/gemm-bench" >"$out/gemm" 2>&1 || cat "$out/gemm"
while read -r l; do summary+=("$l"); done < <(grep '^gemm' "$out/gemm")

echo
echo "# summary: tests/gpu/run.sh on $(hostname)"
printf '%s\n' "${summary[@]}"
