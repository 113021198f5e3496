#!/bin/bash
# run.sh W [RUNS] [FLAGS_A] [FLAGS_B]: appendload with W writers against a fresh rindled (and a
# fresh cluster) per repetition, started with FLAGS_A and with FLAGS_B in turn, RUNS (3)
# repetitions each. By default A is group commit on (-streams-append-group 64) and B off (1);
#
#	bash tools/appendload/run.sh 8 6 "-streams-append-writers 1" "-streams-append-writers 2"
#
# compares one append transaction at a time with two. A and B may start with NAME=VALUE words,
# set in rindled's environment, and an absolute path to another rindled binary:
#
#	bash tools/appendload/run.sh 8 3 "GOGC=100" "GOGC=400"
#	bash tools/appendload/run.sh 8 3 "/tmp/rindled-before" "/tmp/rindled-after"
#
# APPENDLOAD_ARGS is passed to the client (say -producer, for idempotent producers' appends).
#
# Each line gives the appends/s, the
# appends per transaction (per transaction id PostgreSQL assigned), and the CPU per append of rindled and of its
# PostgreSQL (every process of the cluster, read from /proc).
set -euo pipefail
W=${1:-8}
RUNS=${2:-3}
A=${3:--streams-append-group 64}
B=${4:--streams-append-group 1}
SECS=5
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
chmod 755 "$work"
trap 'pkill -f "$work/rindled -addr" || true; rm -rf "$work"' EXIT
go build -o "$work/rindled" ./cmd/rindled
go build -o "$work/appendload" ./tools/appendload

# shellcheck source=procs.sh
. tools/appendload/procs.sh

# nextxid: the transaction id PostgreSQL assigns next. Every append transaction writes, so takes
# one; the difference over a run counts them (and the few other writes, lease renewals, of the
# run). pg_stat_database's commit count would lag: a busy backend reports it at most once a
# second.
nextxid() {
	psql -h "$work/data/pg" -U postgres -d rindle -Atc "SELECT pg_snapshot_xmax(pg_current_snapshot())"
}
hz=$(getconf CLK_TCK)
for rep in $(seq "$RUNS"); do
	for flags in "$A" "$B"; do
		rm -rf "$work/data"
		bin="$work/rindled" envs=() args=()
		for w in $flags; do
			if [ ${#args[@]} -eq 0 ] && [[ $w == [A-Za-z_]*=* ]]; then
				envs+=("$w")
			elif [ ${#args[@]} -eq 0 ] && [[ $w == /* ]] && [ -x "$w" ]; then
				bin=$w
			else
				args+=("$w")
			fi
		done
		env "${envs[@]}" "$bin" -addr 127.0.0.1:18090 -data "$work/data" -demo false "${args[@]}" >"$work/log" 2>&1 &
		pid=$!
		for _ in $(seq 120); do curl -sf localhost:18090/readyz >/dev/null 2>&1 && break; sleep 1; done
		token=$("$work/rindled" token -data "$work/data" -sub load -scope "producer admin")
		pg=$(pgrep -f "postgres -D $work/data/pg/data" | head -1)
		x0=$(nextxid)
		procs "$pid" "$pg" | sort -u -k1,1 >"$work/cpu0"
		# shellcheck disable=SC2086 # APPENDLOAD_ARGS is words
		out=$("$work/appendload" -base http://127.0.0.1:18090 -token "$token" -w "$W" -s "$SECS" ${APPENDLOAD_ARGS:-})
		procs "$pid" "$pg" | sort -u -k1,1 >"$work/cpu1"
		x1=$(nextxid)
		rate=${out%% appends/s*}
		# A process that started during the run (a backend) counts from zero.
		cpu=$(join -a2 "$work/cpu0" "$work/cpu1" | awk -v rp="$pid" '{ d = (NF == 2) ? $2 : $3 - $2; if ($1 == rp) r += d; else p += d } END { print r + 0, p + 0 }')
		echo "rep $rep [$flags] W$W: $out; $(awk -v r="$rate" -v s="$SECS" -v c="$((x1 - x0))" -v hz="$hz" -v cpu="$cpu" 'BEGIN {
			split(cpu, t, " "); n = r * s
			printf "%.2f appends per transaction; CPU per append: rindled %.0f µs, PostgreSQL %.0f µs", n / c, t[1] / hz / n * 1e6, t[2] / hz / n * 1e6 }')"
		kill "$pid"
		wait "$pid" || true
	done
done
