#!/bin/sh
# All-reduce beside OpenMPI (shared memory), torch.distributed's gloo and the machine's
# floor, in one run on one machine: for each world, the peers and ddp-bench (over shared
# memory, from malloc'd buffers and from ddp_alloc's, and over ZeroMQ) take turns, ROUNDS
# times each; each figure is the best and the median of its rounds (the machine is shared
# and noisy: best-of is fair to all, the median says how noisy it was).
#
#   tests/bench/allreduce_vs_mpi.sh BUILD_DIR [ROUNDS] [WORLDS] [ANCHORS_DIR]
#
# WORLDS: "2 4" by default. The floor (../shared/anchors/shm_limit.c: two processes,
# inputs already shared, spin flags, no timeouts) exists for world 2 only. Needs
# openmpi-bin, libopenmpi-dev and python3-torch (deploy/install-deps.sh --bench). Prints a
# table per world: times in us and busbw in GB/s as best/median, then the ratios of the
# bests against OpenMPI and the floor, and the median of each round's ratio to OpenMPI.
set -eu
build=$1
rounds=${2:-3}
worlds=${3:-2 4}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/stats.sh"
anchors=${4:-$here/../../../shared/anchors}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

mpicc -O2 -o "$out/mpi_allreduce" "$anchors/mpi_allreduce.c"
gcc -O2 -march=native -o "$out/shm_limit" "$anchors/shm_limit.c"
mpi() { # world: rows "bytes time_us busbw"
  mpirun --allow-run-as-root --oversubscribe -np "$1" "$out/mpi_allreduce" | awk '!/^#/ { print $1, $2, $4 }'
}
gloo() {
  /usr/bin/python3 "$anchors/gloo_allreduce.py" "$1" 2>/dev/null | awk '!/^#/ { print $1, $2, $4 }'
}
ddp() { # world transport [--alloc]
  DDP_TRANSPORT=$2 "$build/bin/ddp-bench" all_reduce -n "$1" -b 4 -e 64M -f 4 ${3:-} | awk '!/^#/ { print $1, $6, $8 }'
}
floor() {
  "$out/shm_limit" | awk '!/^#/ { print $1, $2, $3 }'
}

for world in $worlds; do
  : > "$out/rows"
  for i in $(seq "$rounds"); do # alternating: each tool once a round
    mpi "$world" | sed "s/^/mpi $i /" >> "$out/rows"
    ddp "$world" shm | sed "s/^/shm $i /" >> "$out/rows"
    ddp "$world" shm --alloc | sed "s/^/alloc $i /" >> "$out/rows"
    gloo "$world" | sed "s/^/gloo $i /" >> "$out/rows"
    ddp "$world" zmq | sed "s/^/zmq $i /" >> "$out/rows"
    if [ "$world" = 2 ]; then floor | sed "s/^/floor $i /" >> "$out/rows"; fi
  done
  # rows: tool round bytes time_us busbw
  awk -v world="$world" -v rounds="$rounds" "$MEDIAN_AWK"'
    { key = $1 SUBSEP $3; times[key] = times[key] " " $4; bws[key] = bws[key] " " $5; at[$1, $2, $3] = $4
      if (!(key in best) || $4 < best[key]) { best[key] = $4; bestbw[key] = $5 }
      if ($1 == "shm") sizes[$3] = 1 }
    function cell(tool, s, what) {
      k = tool SUBSEP s
      if (!(k in best)) return "-"
      return what == "t" ? sprintf("%.1f/%.1f", best[k], median(times[k])) : sprintf("%.2f/%.2f", bestbw[k], median(bws[k]))
    }
    function ratio(a, b, s) { # time of a over time of b, bests
      return ((a SUBSEP s) in best && (b SUBSEP s) in best && best[b SUBSEP s] > 0) ? sprintf("%.2f", best[a SUBSEP s] / best[b SUBSEP s]) : "-"
    }
    function paired(a, b, s,   i, l) { # the median over rounds of the time of a over that of b
      l = ""
      for (i = 1; i <= rounds; i++)
        if ((a, i, s) in at && (b, i, s) in at && at[b, i, s] > 0) l = l " " at[a, i, s] / at[b, i, s]
      return l == "" ? "-" : sprintf("%.2f", median(l))
    }
    END {
      printf "\n# all_reduce f32 sum, world %d, %d rounds alternating; each cell best/median\n", world, rounds
      printf "| bytes | OpenMPI us | ddp shm us | ddp alloc us | ddp zmq us | gloo us | floor us | OpenMPI busbw | ddp shm busbw | ddp alloc busbw | floor busbw | shm/MPI time | MPI/shm time (busbw x) | MPI/alloc time | shm/floor time | MPI/shm, per round | MPI/alloc, per round |\n"
      printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
      n = 0; for (s in sizes) list[++n] = s + 0
      for (i = 2; i <= n; i++) for (j = i; j > 1 && list[j-1] > list[j]; j--) { t = list[j]; list[j] = list[j-1]; list[j-1] = t }
      for (i = 1; i <= n; i++) {
        s = list[i]
        printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s, cell("mpi", s, "t"),
          cell("shm", s, "t"), cell("alloc", s, "t"), cell("zmq", s, "t"), cell("gloo", s, "t"), cell("floor", s, "t"),
          cell("mpi", s, "b"), cell("shm", s, "b"), cell("alloc", s, "b"), cell("floor", s, "b"), ratio("shm", "mpi", s),
          ratio("mpi", "shm", s), ratio("mpi", "alloc", s), ratio("shm", "floor", s), paired("mpi", "shm", s), paired("mpi", "alloc", s)
      }
      print "# busbw in GB/s. shm/MPI time: lower is better (goal, world 2: at most 3 from 4 B to 4 KiB);"
      print "# MPI/shm time is the busbw ratio (goal, world 2: at least 1.5 from 64 KiB to 64 MiB; world 4: at least 1 from 1 MiB)."
      print "# Per round: the median of the ratios of each round'"'"'s runs (taking turns, they share the machine'"'"'s mood)."
    }' "$out/rows"
done
