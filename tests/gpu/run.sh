#!/bin/bash
# The GPU checks, in one run of a few minutes on a machine with an NVIDIA GPU, ending in
# one summary (exit 1 if anything failed): the CUDA backend's tests, GPU training against
# the CPU's, a short benchmark
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
# CUDA's libraries where the system has none: the toolkit's beside nvcc, then those pip
# installs with PyTorch (NCCL; cudart and cuBLAS, which CUDA 13's wheels keep in cu13/lib).
cuda_libs=$(
  nvcc=$(command -v nvcc) && for d in "${nvcc%/bin/nvcc}"/lib64 "${nvcc%/bin/nvcc}"/lib; do [ -d "$d" ] && echo "$d"; done
  python3 - 2>/dev/null <<'PY'
import importlib, os
for name in ("nvidia.nccl", "nvidia.cu13", "nvidia.cublas", "nvidia.cuda_runtime"):
    try:
        paths = importlib.import_module(name).__path__
    except Exception:
        continue
    for p in paths:
        if os.path.isdir(os.path.join(p, "lib")):
            print(os.path.join(p, "lib"))
PY
)
for d in $cuda_libs; do export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"; done
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
failed=0
# The whole run within a budget (a device session allows 10 minutes a call): a step that
# hangs costs its own limit, and what no longer fits is skipped, so the summary still comes.
budget=${DDP_GPU_BUDGET_S:-450}
limit() { # S: prints the seconds a step may take, at most S; fails when too few are left
  local left=$((budget - SECONDS))
  [ "$left" -ge 15 ] || return 1
  echo $((left < $1 ? left : $1))
}
bounded() { # S COMMAND...: COMMAND within limit S; exit 125 (said) when the budget is spent
  local t
  if ! t=$(limit "$1"); then
    echo "skipped: the run's budget of $budget s is spent"
    return 125
  fi
  shift
  timeout -k 5 "$t" "$@"
}
worker() { # N args...: a job of N workers; prints rank 0's RESULT line
  local n=$1 t
  shift
  t=$(limit 90) || { echo "skipped: the run's budget of $budget s is spent" >"$out/stderr"; return 1; }
  timeout -k 5 "$t" "$build/bin/ddp-run" -n "$n" -- "$build/bin/ddp-worker" --data "$data" "$@" 2>"$out/stderr" |
    grep '^\[rank 0\] RESULT'
}
outcome() { # RESULT-line: sets result to "ok, test accuracy X", or to FAILED (counted)
  if [ -n "$1" ]; then
    result="ok, test accuracy $(echo "$1" | field test_acc)"
  else
    failed=$((failed + 1))
    result=FAILED
  fi
}

if ! gpu=$(nvidia-smi -i 0 --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null) ||
  [ -z "$gpu" ]; then
  echo "run.sh: no GPU here (nvidia-smi found none)"
  exit 77
fi
say "GPU: $gpu"
missing=$(ldd "$build/bin/ddp-worker" "$build"/lib*/ddpd/backend_cuda.so "$build"/lib/*/ddpd/backend_cuda.so 2>/dev/null |
  grep 'not found' || true)
module=$(ls "$build"/lib*/ddpd/backend_cuda.so "$build"/lib/*/ddpd/backend_cuda.so 2>/dev/null | head -1)
if [ -z "$module" ] || [ -n "$missing" ]; then # every GPU step would fail the same way
  failed=$((failed + 1))
  say "FAILED: ddp-worker's CUDA module ${module:-(not in $build)} cannot load: ${missing:-missing}"
fi

# 1. The CUDA backend against the CPU backend, op by op (77: it found no usable GPU).
bounded 120 "$build/bin/check_backend_cuda" >"$out/check" 2>&1
code=$?
if [ "$code" -eq 0 ]; then
  say "check_backend_cuda: passed"
else
  cat "$out/check"
  failed=$((failed + 1))
  say "check_backend_cuda: FAILED with exit $code (output above)"
fi

# 2. The same training on the GPU and the CPU: one epoch of mlp, 2 workers, ddp.
cpu=$(worker 2 --model mlp --epochs 1 --mode ddp --device cpu)
gpu_run=$(worker 2 --model mlp --epochs 1 --mode ddp --device cuda:0) || cat "$out/stderr"
outcome "$cpu"
on_cpu=$result
outcome "$gpu_run"
say "mlp 1 epoch, 2 workers ddp: CPU $on_cpu; GPU $result"
for mode in dp ps; do
  r=$(worker 2 --model mlp --steps 50 --mode "$mode" --device cuda:0) || cat "$out/stderr"
  outcome "$r"
  say "mlp 50 steps, 2 workers $mode on the GPU: $result"
done
# ddp over shared memory: the gradient block is registered with CUDA (pinned), so the
# buckets land in it by DMA; the same parameters as over ZeroMQ, byte for byte.
r=$(worker 2 --model mlp --steps 50 --mode ddp --device cuda:0 --transport shm --checkpoint "$out/shm.ckpt") ||
  cat "$out/stderr"
outcome "$r"
pinned=$(grep -c "cannot pin" "$out/stderr")
z=$(worker 2 --model mlp --steps 50 --mode ddp --device cuda:0 --transport zmq --checkpoint "$out/zmq.ckpt") ||
  cat "$out/stderr"
if [ "$pinned" != 0 ] || [ -z "$z" ] || ! cmp -s "$out/shm.ckpt" "$out/zmq.ckpt"; then
  [ "$result" = FAILED ] || failed=$((failed + 1))
  result="FAILED ($pinned ranks could not pin the block; checkpoints $(cmp -s "$out/shm.ckpt" "$out/zmq.ckpt" &&
    echo equal || echo differ))"
fi
say "mlp 50 steps, 2 workers ddp on the GPU over shm (block pinned, same bits as zmq): $result"
# Model parallel: two stages, both on GPU 0 here (the same path as two GPUs, one copy each way).
r=$(worker 2 --model mlp --steps 50 --mode ddp --device cuda:0 --devices 0,0) || cat "$out/stderr"
outcome "$r"
say "mlp 50 steps, 2 workers ddp --devices 0,0: $result"
# NCCL will not put two ranks on one GPU: one rank, to run the communicator's whole path.
r=$(worker 1 --model mlp --steps 50 --mode ddp --device cuda:0 --transport nccl) || cat "$out/stderr"
outcome "$r"
say "mlp 50 steps, 1 worker ddp --transport nccl: $result"
if bounded 60 "$build/bin/ddp-run" -n 1 -- "$build/bin/ddp-worker" --data "$data" --steps 1 --device cuda:99 \
  >"$out/bad" 2>&1; then
  failed=$((failed + 1))
  say "--device cuda:99: FAILED (it ran)"
elif why=$(grep -o 'no GPU 99[^;]*' "$out/bad" | head -1) && [ -n "$why" ]; then
  say "--device cuda:99: refused: $why"
else
  failed=$((failed + 1))
  say "--device cuda:99: FAILED (no 'no GPU 99' in its error: $(tail -1 "$out/bad"))"
fi

# 3. The benchmark: mlp on GPU 0, one epoch each; memory from every rank's metrics.
printf -v header "%-26s %10s  %s" "mlp on one GPU, 1 epoch" "samples/s" \
  "per rank: peak tracked / whole GPU in use (MiB)"
summary+=("$header")
for cfg in "1 ddp" "2 ddp" "2 dp"; do
  read -r n mode <<<"$cfg"
  rm -f "$out"/m-*.jsonl
  r=$(worker "$n" --model mlp --epochs 1 --mode "$mode" --device cuda:0 --metrics "$out/m-%r.jsonl") ||
    { cat "$out/stderr"; failed=$((failed + 1)); }
  mem=$(python3 - "$out" "$n" 2>/dev/null <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
cells = []
for r in range(n):
    lines = [json.loads(l) for l in open(f"{out}/m-{r}.jsonl")]
    last = [j for j in lines if j["type"] == "epoch"][-1]
    dev = next(iter(last["device_memory"].values()))
    cells.append("%.1f / %.0f" % (dev["peak_bytes"] / 2**20, dev.get("device_used_bytes", 0) / 2**20))
print(", ".join(cells))
PY
  ) || mem="(no metrics)"
  printf -v line "%-26s %10s  %s" "$n worker(s), $mode" "$(echo "$r" | field samples_per_s)" "$mem"
  summary+=("$line")
done

# 4. cuBLAS SGEMM against the card's FP32 peak.
bounded 120 "$build/bin/gemm-bench" >"$out/gemm" 2>&1 || { cat "$out/gemm"; failed=$((failed + 1)); }
while read -r l; do summary+=("$l"); done < <(grep '^gemm' "$out/gemm")

echo
echo "# summary: tests/gpu/run.sh on $(hostname), $failed failed, ${SECONDS} s"
printf '%s\n' "${summary[@]}"
[ "$failed" -eq 0 ]
