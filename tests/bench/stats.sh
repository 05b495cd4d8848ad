# Sourced by the benchmark scripts: each figure is the best and the median of its rounds
# (best-of is fair to all, the median says how noisy the machine was).

# For awk programs: median(list), list a space-separated string of numbers.
MEDIAN_AWK='
  function median(list,   v, n, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }'

# Numbers on stdin -> "best/median": best the largest, or with "min" the smallest.
stats() {
  awk -v min="${1:-}" "$MEDIAN_AWK"'
    { l = l " " $1; if (n++ == 0 || (min ? $1 + 0 < b : $1 + 0 > b)) b = $1 + 0 }
    END { printf "%.6g/%.6g\n", b, median(l) }'
}
first() { cut -d/ -f1; }
# Two files of one figure a round, in the same order (the rounds alternate): the ratio of
# each round's pair, as "median (lowest-highest)". On a machine whose speed swings in
# minutes a round's two runs share its conditions; the bests of each may not.
paired() {
  paste -d' ' "$1" "$2" | awk "$MEDIAN_AWK"'
    $2 + 0 > 0 { r = $1 / $2; l = l " " r; if (n++ == 0 || r < lo) lo = r; if (n == 1 || r > hi) hi = r }
    END { if (n) printf "%.2f (%.2f-%.2f)\n", median(l), lo, hi; else print "-" }'
}
ratio() { echo "scale=2; $1 / $2" | bc -l; }
