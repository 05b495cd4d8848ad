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
ratio() { echo "scale=2; $1 / $2" | bc -l; }
