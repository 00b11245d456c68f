#!/usr/bin/env bash
# Every installed tool (paths given) answers --help and -h with its usage
# (naming the tool, with an example) on stdout and exit 0, and refuses an
# unknown option with exit 2 and a message on stderr naming the tool and
# the option, nothing on stdout. No MPI launch: the tools parse first.
set -uo pipefail
failed=0
fail() { echo "FAIL: $*"; failed=1; }
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
for tool in "$@"; do
  name=$(basename "$tool")
  for h in --help -h; do
    "$tool" $h >"$out" 2>"$err"
    rc=$?
    [ $rc -eq 0 ] || fail "$name $h: exit $rc (want 0): $(head -3 "$err")"
    grep -q "usage: .*$name" "$out" || fail "$name $h: stdout has no 'usage: ... $name'"
    grep -qi "example" "$out" || fail "$name $h: usage shows no example"
  done
  bogus=--no-such-option-$$
  "$tool" $bogus >"$out" 2>"$err"
  rc=$?
  # loomrun passes options to the MPI's launcher: its own check is no program.
  if [ "$name" = loomrun ]; then
    "$tool" >"$out" 2>"$err"
    rc=$?
    bogus="no program"
  fi
  [ $rc -eq 2 ] || fail "$name $bogus: exit $rc (want 2)"
  grep -q "^$name: .*$bogus" "$err" || fail "$name $bogus: stderr does not say '$name: ... $bogus': $(head -3 "$err")"
  [ ! -s "$out" ] || fail "$name $bogus: wrote to stdout: $(head -3 "$out")"
  [ $failed -eq 0 ] && echo "ok: $name"
done
exit $failed
