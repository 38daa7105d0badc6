#!/usr/bin/env bash
# Checks `paytwice bench` against an outside load generator, wrk, on one
# server: new payments at 16 connections, the two taking turns (wrk,
# paytwice bench, wrk, …, wrk). A round's ratio is paytwice bench's
# throughput over the mean of the wrk runs just before and just after it,
# so that a server slowing down as its tables grow favours neither, and a
# burst of other load on the machine lands on one run of one of them, not
# on two runs of the same one back to back. The two should agree within
# ±20%. Every such round is followed by a control round, in which wrk
# takes paytwice bench's place (wrk, wrk, wrk): its ratio is wrk against
# itself, the spread that the machine alone gives a ratio of two runs.
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

# Each runs with $1 connections, keeps its files under the name $2, and
# prints its throughput and its own CPU per request in µs (user+system,
# from bash's time): the CPU a load generator takes from the cores the
# server shares is the likeliest reason for the two to disagree.
TIMEFORMAT='%3U %3S'
ours() {
	{ time "$tmp/paytwice" bench -url "$URL" -mode new -c "$1" -d "${SECONDS_EACH}s" >"$tmp/$2.out"; } 2>"$tmp/$2.time"
	awk -v cpu="$(cat "$tmp/$2.time")" '$1 == "requests" { n = $2 } $1 == "throughput" { t = $2 }
		END { split(cpu, c, " "); printf "%s %.0f\n", t, (c[1] + c[2]) / n * 1e6 }' "$tmp/$2.out"
}
theirs() {
	{ time wrk -t2 -c"$1" -d"${SECONDS_EACH}s" -s bench/wrk-payments.lua "$URL" >"$tmp/$2.out"; } 2>"$tmp/$2.time"
	awk -v cpu="$(cat "$tmp/$2.time")" '$2 == "requests" && $3 == "in" { n = $1 } $1 == "throughput" { t = $2 }
		END { split(cpu, c, " "); printf "%s %.0f\n", t, (c[1] + c[2]) / n * 1e6 }' "$tmp/$2.out"
}
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f\n", a / b }'; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)" >&2
"$tmp/paytwice" bench -url "$URL" -mode new -c 16 -n 2000 >/dev/null # warm-up
for f in turns turns.ours turns.theirs control once once.ours once.theirs; do : >"$tmp/$f"; done

# Taking turns: what each reports when it has the server to itself.
read -r w wcpu <<<"$(theirs 16 w)"
echo "$wcpu" >>"$tmp/turns.theirs"
echo "wrk $w/s ($wcpu µs/request)" >&2
for r in $(seq "$ROUNDS"); do
	before=$w
	read -r p pcpu <<<"$(ours 16 p)"
	read -r w wcpu <<<"$(theirs 16 w)"
	ratio "$p" "$(awk -v a="$before" -v b="$w" 'BEGIN { print (a + b) / 2 }')" >>"$tmp/turns"
	echo "$pcpu" >>"$tmp/turns.ours"
	echo "$wcpu" >>"$tmp/turns.theirs"
	echo "round $r (load $(cut -d' ' -f1 /proc/loadavg)): paytwice bench $p/s (its CPU $pcpu µs/request), then wrk $w/s ($wcpu µs/request): $(tail -1 "$tmp/turns")" >&2
	before=$w
	read -r c _ <<<"$(theirs 16 c)"
	read -r w wcpu <<<"$(theirs 16 w)"
	ratio "$c" "$(awk -v a="$before" -v b="$w" 'BEGIN { print (a + b) / 2 }')" >>"$tmp/control"
	echo "control $r (load $(cut -d' ' -f1 /proc/loadavg)): wrk $c/s in paytwice bench's place, then wrk $w/s: $(tail -1 "$tmp/control")" >&2
done

# At once, half the connections each: both see the same server at the same
# moment, so the machine's other load cancels out of the ratio, and what is
# left is how each counts and how soon each sends its next request.
for r in $(seq "$ROUNDS"); do
	ours 8 p >"$tmp/p.res" &
	theirs 8 w >"$tmp/w.res"
	wait $!
	read -r p pcpu <"$tmp/p.res"
	read -r w wcpu <"$tmp/w.res"
	ratio "$p" "$w" >>"$tmp/once"
	echo "$pcpu" >>"$tmp/once.ours"
	echo "$wcpu" >>"$tmp/once.theirs"
	echo "at once $r (load $(cut -d' ' -f1 /proc/loadavg)): paytwice bench $p/s (its CPU $pcpu µs/request), wrk $w/s ($wcpu µs/request): $(tail -1 "$tmp/once")" >&2
done

echo "| $store, new payments/s, rounds of ${SECONDS_EACH} s | paytwice bench over wrk | each one's own CPU per request (medians) |"
echo "| --- | --- | --- |"
echo "| taking turns, 16 connections, $ROUNDS rounds (each against the wrk runs before and after it) | **$(median <"$tmp/turns")×** (rounds: $(paste -sd' ' "$tmp/turns")) | paytwice bench $(median <"$tmp/turns.ours") µs, wrk $(median <"$tmp/turns.theirs") µs |"
echo "| control: wrk in paytwice bench's place, $ROUNDS rounds taken the same way | **$(median <"$tmp/control")×** (rounds: $(paste -sd' ' "$tmp/control")) | |"
echo "| at once, 8 connections each, $ROUNDS rounds | **$(median <"$tmp/once")×** (rounds: $(paste -sd' ' "$tmp/once")) | paytwice bench $(median <"$tmp/once.ours") µs, wrk $(median <"$tmp/once.theirs") µs |"
