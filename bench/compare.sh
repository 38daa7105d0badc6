#!/usr/bin/env bash
# Measures paytwice from a separate process with `paytwice bench` and the
# article's in-process pay() (bench/article_pay.py) in one run, on one
# machine, and prints a Markdown table. New payments are measured in
# alternating rounds (article, paytwice, article, paytwice, …) and the
# ratio is taken round by round, so a machine whose speed drifts during
# the run still gives a fair comparison.
#
# Run it from the repository root:
#
#	bench/compare.sh                # 3 rounds of 5 s each
#	ROUNDS=5 SECONDS_EACH=8 bench/compare.sh
#
# It builds the binary into a temporary folder, serves on 127.0.0.1:18080
# (PORT to change it) over fresh database files with synchronous=FULL, and
# removes everything when it ends. Linux only: server CPU comes from /proc.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECONDS_EACH=${SECONDS_EACH:-5}
PORT=${PORT:-18080}
URL=http://127.0.0.1:$PORT

tmp=$(mktemp -d)
server=
cleanup() {
	if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/paytwice" .
"$tmp/paytwice" -addr "127.0.0.1:$PORT" -db "$tmp/paytwice.db" >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
	if curl -s -o /dev/null "$URL/"; then break; fi
	sleep 0.1
done

bench() { "$tmp/paytwice" bench -url "$URL" -pid "$server" "$@"; }
field() { awk -v k="$1" -v n="$2" '$1 == k { print $n }'; }
# cpu_ms_per_request OUTPUT: the server's CPU per request, in ms.
cpu() { awk '$1 == "server" && $2 == "CPU" { print $5 }'; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3), $(python3 --version)" >&2
bench -mode new -c 16 -n 2000 >/dev/null # warm-up: page cache, connections, WAL

: >"$tmp/ratios"
: >"$tmp/article"
: >"$tmp/paytwice16"
for r in $(seq "$ROUNDS"); do
	a=$(python3 bench/article_pay.py -d "$SECONDS_EACH" --replays 1 | awk '$1 == "new" { print $NF == "payments/s" ? $(NF-1) : "" }')
	p=$(bench -mode new -c 16 -d "${SECONDS_EACH}s" | field throughput 2)
	echo "$a" >>"$tmp/article"
	echo "$p" >>"$tmp/paytwice16"
	awk -v a="$a" -v p="$p" 'BEGIN { printf "%.1f\n", p / a }' >>"$tmp/ratios"
	echo "round $r: article pay() $a/s, paytwice 16 clients $p/s" >&2
done

seq1=$(bench -mode new -c 1 -d "${SECONDS_EACH}s")
c64=$(bench -mode new -c 64 -d "${SECONDS_EACH}s")
c16=$(bench -mode new -c 16 -d "${SECONDS_EACH}s")
replay=$(bench -mode replay -c 16 -d "${SECONDS_EACH}s")
articleReplay=$(python3 bench/article_pay.py -n 200 --replays 50000 | awk '$1 == "replays" { print $(NF-1) }')
storm=$(bench -mode storm -c 1000 -n 5)

ticks() { awk '{ print $14 + $15 }' "/proc/$server/stat"; }
t0=$(ticks)
sleep 30
idle=$(( ($(ticks) - t0) * 10 ))

cat <<EOF
| measured from a separate process over HTTP, synchronous=FULL | paytwice | article pay() in-process, same run | ratio |
| --- | --- | --- | --- |
| new payments/s, 16 clients (median of $ROUNDS alternating rounds of ${SECONDS_EACH} s) | $(median <"$tmp/paytwice16") | $(median <"$tmp/article") | **$(median <"$tmp/ratios")×** (rounds: $(paste -sd' ' "$tmp/ratios")) |
| new payments/s, 64 clients | $(echo "$c64" | field throughput 2) | | |
| new payments/s, 1 client | $(echo "$seq1" | field throughput 2) | | |
| replays/s, 16 clients | $(echo "$replay" | field throughput 2) | $articleReplay | |
| new payment latency, 16 clients: p50 / p99 | $(echo "$c16" | awk '$1 == "latency" { print $3 " / " $6 " ms" }') | | |
| 1,000 requests with one key, 5 storms: slowest storm fully answered | $(echo "$storm" | awk '$1 == "storms" { print $(NF-1) " ms" }'), fresh 201s per storm: $(echo "$storm" | awk '$1 == "fresh" { print $3 }') | | |
| server CPU per new payment, 1 client | $(echo "$seq1" | cpu) ms | | |
| server CPU per new payment, 16 clients | $(echo "$c16" | cpu) ms | | |
| server CPU per new payment, 64 clients | $(echo "$c64" | cpu) ms | | |
| server CPU per replay, 16 clients | $(echo "$replay" | cpu) ms | | |
| idle server CPU over 30 s | $idle ms | | |
EOF
