#!/bin/sh
# systemd-analyze verify on every unit, configured with this build's binaries.
set -eu
src=$1
build=$2
command -v systemd-analyze >/dev/null || { echo "no systemd-analyze: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for unit in ddpd.service ddp-worker@.service; do
  sed "s|@BINDIR@|$build/bin|g" "$src/deploy/systemd/$unit.in" > "$dir/$unit"
done
cp "$src/deploy/systemd/ddp-train.target" "$dir/"
cp "$dir/ddp-worker@.service" "$dir/ddp-worker@0.service"
cp "$dir/ddp-worker@.service" "$dir/ddp-worker@1.service"
cd "$dir"
out=$(systemd-analyze verify ddpd.service ddp-worker@0.service ddp-train.target 2>&1) || { echo "$out"; exit 1; }
# verify prints problems as warnings without failing on some of them: none is acceptable
if echo "$out" | grep -v "^$" | grep -vi "Failed to load.*ddp-worker@1.service\|ddp-worker@1" | grep -q .; then
  echo "$out"
  exit 1
fi
# each service is held to limits of its own (issue 14): memory and tasks
for unit in ddpd.service ddp-worker@.service; do
  for key in MemoryMax TasksMax; do
    grep -q "^$key=" "$unit" || { echo "$unit: no $key="; exit 1; }
  done
done
echo "units: ok"
