#!/usr/bin/env bash
# Makes the README's table of figures: builds the benchmarks of a commit (a fresh clone of this
# repository) once, then runs each three times, every repetition a fresh process (and, for
# rindle-load, fresh servers per scenario). Run it on a machine doing nothing else; it takes
# about 25 minutes on 2 cores.
#
#   bash tools/figures/run.sh [REV] [OUT]      # REV defaults to HEAD, OUT to /tmp/rindle-figures-REV
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
rev=$(git -C "$repo" rev-parse --short "${1:-HEAD}")
out=${2:-/tmp/rindle-figures-$rev}
mkdir -p "$out"
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git clone -q "$repo" "$src" && git -C "$src" checkout -q "$rev"
bin=$out/bin
mkdir -p "$bin"
cd "$src"
go test -c -o "$bin/producer.test" ./producer
go test -c -o "$bin/checkpoint.test" ./checkpoint
go test -c -o "$bin/ivm.test" ./ivm
go build -o "$bin/rindle-load" ./cmd/rindle-load
go build -o "$bin/rindled" ./cmd/rindled
for i in 1 2 3; do (cd producer && "$bin/producer.test" -test.run '^$' -test.bench 'Fanout$|FanoutWake' -test.benchmem) > "$out/fanout-$i.txt" 2>&1; done
for i in 1 2 3; do (cd producer && "$bin/producer.test" -test.run '^$' -test.bench 'FanoutDirect$/K=1000$|Fanout$/K=1000$' -test.benchtime 2s -test.benchmem) > "$out/fanout-direct-$i.txt" 2>&1; done
for i in 1 2 3; do (cd checkpoint && "$bin/checkpoint.test" -test.run '^$' -test.bench CheckpointSaturation -test.benchtime 1x) > "$out/saturation-$i.txt" 2>&1; done
for i in 1 2 3; do (cd checkpoint && "$bin/checkpoint.test" -test.run '^$' -test.bench 'CheckpointLoad|WALPerByte/Default' -test.benchtime 1x) > "$out/load-$i.txt" 2>&1; done
for i in 1 2 3; do (cd ivm && "$bin/ivm.test" -test.run '^$' -test.bench CommitToViewLag -test.benchtime 1x) > "$out/view-$i.txt" 2>&1; done
for i in 1 2 3; do "$bin/rindle-load" -rindled "$bin/rindled" -runs 1 -scenarios fanout,idle -floor -direct-floor > "$out/load-http-$i.txt" 2>&1; done
echo "figures of $rev in $out"
