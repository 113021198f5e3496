#!/bin/bash
# vs-reference.sh [W] [RUNS]: acknowledged appends per second with a Go client, side by side:
# the npm reference server (file-backed), a server that stores nothing, and rindled, each in a
# fresh process per repetition (rindled on a fresh private cluster), W writers (8) on W streams,
# one request in flight each, 5 s, RUNS repetitions (3). bench.mjs runs the same workload from
# one Node process, whose own ceiling is a few times the reference's; this client's is tens of
# times, so the ratio here is the servers'. Each side's CPU is read per process from /proc:
# rindled plus every process of its PostgreSQL, and the reference's node process.
#
# Needs node and tools/ds-conformance's packages (npm ci there).
set -euo pipefail
W=${1:-8}
RUNS=${2:-3}
SECS=5 # each run's length: the client's -s, and what its appends/s are per
cd "$(dirname "$0")/../.."
root=$(pwd)
ds=$root/tools/ds-conformance
[ -d "$ds/node_modules/@durable-streams/server" ] || { echo "vs-reference: run npm ci in $ds first" >&2; exit 1; }
work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/rindled" ./cmd/rindled
go build -o "$work/appendload" ./tools/appendload

# shellcheck source=procs.sh
. "$root/tools/appendload/procs.sh"
hz=$(getconf CLK_TCK)

# node_server SCRIPT [ARGS]: starts a Node server of tools/ds-conformance in its own process;
# sets pid and url.
node_server() {
	: >"$work/url"
	node "$ds/$1" "${@:2}" >"$work/url" 2>"$work/node.log" &
	pid=$!
	pids+=("$pid")
	url=""
	for _ in $(seq 200); do
		url=$(grep -o 'http://[0-9.:]*' "$work/url" | head -1 || true)
		[ -n "$url" ] && return
		sleep 0.1
	done
	echo "vs-reference: $1 did not start" >&2
	cat "$work/node.log" >&2
	exit 1
}

# measure NAME URL TOKEN PIDS...: runs the client, prints appends/s and the server's CPU per append.
measure() {
	local name=$1 base=$2 token=$3
	shift 3
	local out rate used
	procs "$@" | sort -u -k1,1 >"$work/cpu0"
	out=$("$work/appendload" -base "$base" -token "$token" -w "$W" -s "$SECS")
	procs "$@" | sort -u -k1,1 >"$work/cpu1"
	rate=${out%% appends/s*}
	# A process that started during the run (a backend) counts from zero.
	used=$(awk 'NR == FNR { t0[$1] = $2; next } { d += $2 - t0[$1] } END { print d + 0 }' "$work/cpu0" "$work/cpu1")
	echo "rep $rep $name: $out, server CPU $(awk -v d="$used" -v hz="$hz" -v r="$rate" -v s="$SECS" 'BEGIN { printf "%.0f", d / hz / (r * s) * 1e6 }') µs per append"
	echo "$name $rate" >>"$work/rates"
}

for rep in $(seq "$RUNS"); do
	mkdir -p "$work/ref$rep"
	node_server reference-server.mjs "$work/ref$rep"
	measure reference "$url" "" "$pid"
	kill "$pid"
	wait "$pid" 2>/dev/null || true

	node_server null-server.mjs
	measure null "$url" "" "$pid"
	kill "$pid"
	wait "$pid" 2>/dev/null || true

	"$work/rindled" -addr 127.0.0.1:18095 -data "$work/data$rep" -demo false >"$work/rindled.log" 2>&1 &
	pid=$!
	pids+=("$pid")
	for _ in $(seq 120); do curl -sf localhost:18095/readyz >/dev/null 2>&1 && break; sleep 1; done
	token=$("$work/rindled" token -data "$work/data$rep" -sub load -scope "producer admin")
	measure rindled http://127.0.0.1:18095 "$token" "$pid" "$(pgrep -f "$work/data$rep/pg/data" | head -1)"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
done

# The per-repetition ratios, min/median/max.
awk '
	{ r[$1, ++n[$1]] = $2 }
	function mmm(a, k,   i, j, t) {
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return sprintf("%.2f / %.2f / %.2f", a[1], a[int((k + 1) / 2)], a[k])
	}
	END {
		k = n["rindled"]
		for (i = 1; i <= k; i++) { a[i] = r["rindled", i] / r["reference", i]; b[i] = r["null", i] / r["reference", i] }
		print "rindled ÷ reference, min / median / max of " k ": " mmm(a, k)
		print "the client'"'"'s ceiling (stores nothing) ÷ reference: " mmm(b, k)
	}' "$work/rates"
