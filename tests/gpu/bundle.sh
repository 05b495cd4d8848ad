#!/bin/bash
# Prepares build-gpu/ for tests/gpu/run.sh on a GPU machine that has the CUDA toolkit and
# driver but not this project's Debian packages (ZeroMQ, protobuf-c, OpenBLAS, ...): a
# Release build with the CUDA backend, the shared libraries its programs load beyond glibc
# and CUDA, and the Fashion-MNIST files; packed as build-bundle/ddp-gpu.tgz (about 45 MiB,
# OpenBLAS is most of it), which run.sh unpacks when build-gpu/ is not there.
#
#   tests/gpu/bundle.sh [CUDA_ARCHITECTURES]     (default 90: the H100 and H200)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=$repo/build-gpu
archs=${1:-90}

cmake -S "$repo" -B "$out" -DCMAKE_BUILD_TYPE=Release -DDDP_CUDA=ON -DDDP_WERROR=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$archs" >/dev/null
cmake --build "$out" -j"$(nproc)"

# What the programs load that a CUDA machine may lack: everything but glibc, the compiler's
# runtime and CUDA's own libraries (cudart, cuBLAS, NCCL: hundreds of MiB), which must come
# from that machine's driver and toolkit (run.sh also looks for pip's NCCL).
rm -rf "$out/deps-lib" && mkdir -p "$out/deps-lib"
for f in "$out"/bin/* $(find "$out" -path '*/ddpd/backend_cuda.so'); do ldd "$f" 2>/dev/null || true; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libpthread|libdl|librt|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" "$out/deps-lib/"; done

rm -rf "$out/fashion-mnist"
cp -rL /usr/share/datasets/fashion-mnist "$out/fashion-mnist"
# The build's own paths are absolute: run.sh links this path to wherever the copy lands.
echo "$repo" > "$out/source-dir"
find "$out" -name '*.o' -delete
find "$out" -depth -type d -name CMakeFiles -exec rm -rf {} +
mkdir -p "$repo/build-bundle"
tar -C "$repo" -czf "$repo/build-bundle/ddp-gpu.tgz" build-gpu
du -sh "$out" "$repo/build-bundle/ddp-gpu.tgz"
