# procs PID...: the processes and, for a PostgreSQL postmaster among them, its children (its
# backends come and go), each as "pid ticks", ticks being user+system time in clock ticks.
# Sourced by run.sh and vs-reference.sh.
procs() {
	local p c
	for p in "$@"; do
		for c in "$p" $(pgrep -P "$p" || true); do
			awk -v p="$c" '{print p, $14 + $15}' "/proc/$c/stat" 2>/dev/null || true
		done
	done
}
