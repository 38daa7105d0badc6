#!/usr/bin/env bash
# Checks `paytwice bench` against an outside load generator, wrk, on one
# server: new payments at 16 connections, in alternating rounds (wrk,
# paytwice bench, wrk, …, each every other round first), with the ratio
# taken round by round. The two should agree within ±20%.
#
# Run it from the repository root (wrk: `apt-get install wrk`):
#
#	bench/outside.sh                 # SQLite
#	PG=postgres://… bench/outside.sh # PostgreSQL (a database of its own, dropped at the end)
#	ROUNDS=6 SECONDS_EACH=8 bench/outside.sh
set -euo pipefail
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }

ROUNDS=${ROUNDS:-4}
SECONDS_EACH=${SECONDS_EACH:-6}
PORT=${PORT:-18210}
PG=${PG:-}
store=SQLite
if [ -n "$PG" ]; then store=PostgreSQL; fi
URL=http://127.0.0.1:$PORT

tmp=$(mktemp -d)
server=
db=$tmp/paytwice.db
pgdb=
cleanup() {
	if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
	if [ -n "$pgdb" ]; then psql -q "$PG" -c "DROP DATABASE IF EXISTS $pgdb WITH (FORCE)" >/dev/null 2>&1 || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/paytwice" .
if [ -n "$PG" ]; then
	pgdb=paytwice_outside_$$
	psql -q "$PG" -c "CREATE DATABASE $pgdb" >/dev/null
	db=${PG%/*}/$pgdb
fi
"$tmp/paytwice" -addr "127.0.0.1:$PORT" -db "$db" >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
	if curl -s -o /dev/null "$URL/"; then break; fi
	sleep 0.1
done

ours() { "$tmp/paytwice" bench -url "$URL" -mode new -c 16 -d "${SECONDS_EACH}s" | awk '$1 == "throughput" { print $2 }'; }
theirs() { wrk -t2 -c16 -d"${SECONDS_EACH}s" -s bench/wrk-payments.lua "$URL" | awk '$1 == "throughput" { print $2 }'; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)" >&2
"$tmp/paytwice" bench -url "$URL" -mode new -c 16 -n 2000 >/dev/null # warm-up
: >"$tmp/ratios"
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then w=$(theirs); p=$(ours); else p=$(ours); w=$(theirs); fi
	awk -v p="$p" -v w="$w" 'BEGIN { printf "%.2f\n", p / w }' >>"$tmp/ratios"
	echo "round $r (load $(cut -d' ' -f1 /proc/loadavg)): paytwice bench $p/s, wrk $w/s" >&2
done
echo "| new payments/s, 16 connections, $ROUNDS alternating rounds of ${SECONDS_EACH} s | paytwice bench over wrk |"
echo "| --- | --- |"
echo "| $store | **$(median <"$tmp/ratios")×** (rounds: $(paste -sd' ' "$tmp/ratios")) |"
