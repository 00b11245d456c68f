#!/usr/bin/env bash
# LOOM_STREAM_TRACE's files, read by tools/stream_trace.py: runs the launch
# command given after the first two arguments (python, the script) with
# LOOM_STREAM_TRACE set, then prints the script's table.
set -euo pipefail
py=$1 script=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
LOOM_STREAM_TRACE=$dir/trace "$@" > /dev/null
"$py" "$script" "$dir/trace"
