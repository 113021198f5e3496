#!/bin/bash
# run.sh W [RUNS]: appendload with W writers against a fresh rindled per repetition, group
# commit on (-streams-append-group 64) and off (1) alternating, RUNS (3) repetitions each.
set -euo pipefail
W=${1:-8}
RUNS=${2:-3}
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
chmod 755 "$work"
trap 'pkill -f "$work/rindled -addr" || true; rm -rf "$work"' EXIT
go build -o "$work/rindled" ./cmd/rindled
go build -o "$work/appendload" ./tools/appendload
for rep in $(seq "$RUNS"); do
	for g in 64 1; do
		rm -rf "$work/data"
		"$work/rindled" -addr 127.0.0.1:18090 -data "$work/data" -demo false -streams-append-group "$g" >"$work/log" 2>&1 &
		pid=$!
		for _ in $(seq 120); do curl -sf localhost:18090/readyz >/dev/null 2>&1 && break; sleep 1; done
		token=$("$work/rindled" token -data "$work/data" -sub load -scope "producer admin")
		echo "rep $rep group $g W$W: $("$work/appendload" -base http://127.0.0.1:18090 -token "$token" -w "$W" -s 5)"
		kill "$pid"
		wait "$pid" || true
	done
done
