#!/usr/bin/env bash
# Checks `paytwice bench` against an outside load generator, wrk, on one
# server: new payments at 16 connections, the two taking turns (wrk,
# paytwice bench, wrk, …, wrk). A round's ratio is paytwice bench's
# throughput over the mean of the wrk runs just before and just after it,
# so that a server slowing down as its tables grow favours neither, and a
# burst of other load on the machine lands on one run of one of them, not
# on two runs of the same one back to back. The two should agree within
# ±20%.
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

# Each prints its throughput and its own CPU per request in µs (user+system,
# from bash's time): the CPU a load generator takes from the cores the
# server shares is the likeliest reason for the two to disagree.
TIMEFORMAT='%3U %3S'
ours() {
	{ time "$tmp/paytwice" bench -url "$URL" -mode new -c 16 -d "${SECONDS_EACH}s" >"$tmp/out"; } 2>"$tmp/cpu"
	awk -v cpu="$(cat "$tmp/cpu")" '$1 == "requests" { n = $2 } $1 == "throughput" { t = $2 }
		END { split(cpu, c, " "); printf "%s %.0f\n", t, (c[1] + c[2]) / n * 1e6 }' "$tmp/out"
}
theirs() {
	{ time wrk -t2 -c16 -d"${SECONDS_EACH}s" -s bench/wrk-payments.lua "$URL" >"$tmp/out"; } 2>"$tmp/cpu"
	awk -v cpu="$(cat "$tmp/cpu")" '$2 == "requests" && $3 == "in" { n = $1 } $1 == "throughput" { t = $2 }
		END { split(cpu, c, " "); printf "%s %.0f\n", t, (c[1] + c[2]) / n * 1e6 }' "$tmp/out"
}
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)" >&2
"$tmp/paytwice" bench -url "$URL" -mode new -c 16 -n 2000 >/dev/null # warm-up
: >"$tmp/ratios"
: >"$tmp/ours.cpu"
: >"$tmp/theirs.cpu"
read -r w wcpu <<<"$(theirs)"
echo "$wcpu" >>"$tmp/theirs.cpu"
echo "wrk $w/s ($wcpu µs/request)" >&2
for r in $(seq "$ROUNDS"); do
	before=$w
	read -r p pcpu <<<"$(ours)"
	read -r w wcpu <<<"$(theirs)"
	awk -v p="$p" -v a="$before" -v b="$w" 'BEGIN { printf "%.2f\n", p / ((a + b) / 2) }' >>"$tmp/ratios"
	echo "$pcpu" >>"$tmp/ours.cpu"
	echo "$wcpu" >>"$tmp/theirs.cpu"
	echo "round $r (load $(cut -d' ' -f1 /proc/loadavg)): paytwice bench $p/s (its CPU $pcpu µs/request), then wrk $w/s ($wcpu µs/request): $(tail -1 "$tmp/ratios")" >&2
done
echo "| new payments/s, 16 connections, $ROUNDS rounds of ${SECONDS_EACH} s, each between two of wrk | paytwice bench over wrk | each one's own CPU per request (medians) |"
echo "| --- | --- | --- |"
echo "| $store | **$(median <"$tmp/ratios")×** (rounds: $(paste -sd' ' "$tmp/ratios")) | paytwice bench $(median <"$tmp/ours.cpu") µs, wrk $(median <"$tmp/theirs.cpu") µs |"
