#!/usr/bin/env bash
# loom-bench --csv for the benchmarks whose rows are their Markdown table's
# (commit, pack, passthrough, memtype): the CSV holds the table's header and
# rows as printed (cells trimmed, a ratio's x dropped, quoted where they hold
# a comma), and a --csv that cannot be written stops the run with an error.
# Usage: bench_csv_test.sh WORKDIR LAUNCHER... LOOM_BENCH
set -uo pipefail
work=$1
shift
mkdir -p "$work"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
# The Markdown table's rows as the CSV should hold them.
as_csv() {
  awk -F'|' '/^\|/ {
    sep = 1; line = ""
    for (i = 2; i < NF; ++i) {
      c = $i; gsub(/^ +| +$/, "", c)
      if (c !~ /^:?-+:?$/) sep = 0
      if (c ~ /^[-+0-9.eE]+x$/) sub(/x$/, "", c)
      if (c ~ /[,"]/) { gsub(/"/, "\"\"", c); c = "\"" c "\"" }
      line = line (i > 2 ? "," : "") c
    }
    if (!sep) print line
  }' "$1"
}
for b in commit pack passthrough memtype; do
  rm -f "$work/$b.csv"
  "$@" "$b" --quick --quiet --csv "$work/$b.csv" >"$work/$b.md"
  rc=$?
  if [ $rc -ne 0 ]; then
    fail "$b: exit $rc"
    continue
  fi
  as_csv "$work/$b.md" >"$work/$b.want"
  [ -s "$work/$b.want" ] || fail "$b: no table on stdout"
  if diff -u "$work/$b.want" "$work/$b.csv"; then echo "ok: $b"; else fail "$b: CSV is not the table"; fi
done
if "$@" commit --quick --quiet --csv "$work/no-such-folder/x.csv" >/dev/null 2>"$work/err"; then
  fail "an unwritable --csv: exit 0"
fi
grep -q "cannot write" "$work/err" || fail "an unwritable --csv: no 'cannot write' on stderr"
exit $failed
