#!/bin/sh
# Installs the build into a scratch prefix and builds a program against it the way a user
# would: with pkg-config and nothing from the source tree.
set -eu
build_dir=$1
extra_cflags=${2:-}   # the sanitizer flags, when the library was built with them
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT

cmake --install "$build_dir" --prefix "$prefix" >/dev/null
for f in bin/ddpd bin/ddpctl bin/ddp-run bin/ddp-bench bin/ddp-worker bin/ddp-compare include/ddp/ddp.h lib/libddp.so lib/pkgconfig/ddp.pc; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
"$prefix/bin/ddpd" --version | grep -q "^ddpd "
# The CUDA backend's module, where it was built: where ddp-worker looks, beside bin/.
if [ -e "$build_dir/lib/ddpd/backend_cuda.so" ]; then
  [ -e "$prefix/lib/ddpd/backend_cuda.so" ] || { echo "missing after install: lib/ddpd/backend_cuda.so"; exit 1; }
  if ldd "$prefix/bin/ddp-worker" | grep -E 'libcudart|libcublas|libnccl'; then
    echo "the installed ddp-worker links CUDA's libraries"; exit 1
  fi
fi

cat > "$prefix/app.c" <<'C'
#include <ddp/ddp.h>
#include <stdio.h>
int main(void) {
    ddp_options o = DDP_OPTIONS_INIT;
    (void)o;
    puts(ddp_strerror(-110));
    return 0;
}
C
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror $extra_cflags -o "$prefix/app" "$prefix/app.c" $(pkg-config --cflags --libs ddp)
out=$(LD_LIBRARY_PATH="$prefix/lib" "$prefix/app")
[ "$out" = "timed out" ] || { echo "unexpected output: $out"; exit 1; }
# Only the public API leaves the library.
if nm -D --defined-only "$prefix/lib/libddp.so" | awk '{print $3}' | grep -v '^ddp_' | grep -v '^_' ; then
  echo "libddp.so exports symbols outside the ddp_ namespace"; exit 1
fi
# torch_ddpd, where it was built: under the prefix where Debian's python3 looks for it
# (<prefix>/lib/python3.X/dist-packages; /usr/local is on its path), finding libddp.so
# from there without LD_LIBRARY_PATH.
if [ -d "$build_dir/python/torch_ddpd" ]; then
  site=$(/usr/bin/python3 -c 'import sys; print("lib/python%d.%d/dist-packages" % sys.version_info[:2])')
  [ -e "$prefix/$site/torch_ddpd/__init__.py" ] || { echo "missing after install: $site/torch_ddpd"; exit 1; }
  PYTHONPATH="$prefix/$site" /usr/bin/python3 -c 'import torch_ddpd, torch.distributed as d; assert d.Backend.DDPD' ||
    { echo "the installed torch_ddpd does not import"; exit 1; }
fi
echo "install: ok"
