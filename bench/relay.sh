#!/usr/bin/env bash
# Measures what the live relay (web/relay.go) costs a server on PostgreSQL:
# new payments/s of one server with the relay (the normal build) and one
# without it (built with -tags norelay), in alternating rounds of one run,
# with the ratio taken round by round, so a machine whose speed drifts
# still gives a fair comparison. Each server has a fresh database of its
# own on the same PostgreSQL; while one is measured the other is idle.
#
# Run it from the repository root with a URL whose role may create
# databases:
#
#	PG=postgres://paytwice:paytwice@127.0.0.1:5432/postgres bench/relay.sh
#	ROUNDS=5 SECONDS_EACH=8 CLIENTS=16 PG=… bench/relay.sh
#
# Linux only: server CPU comes from /proc.
set -euo pipefail

: "${PG:?set PG to a postgres:// URL whose role may create databases}"
ROUNDS=${ROUNDS:-4}
SECONDS_EACH=${SECONDS_EACH:-8}
CLIENTS=${CLIENTS:-16}
PORT=${PORT:-18090}

tmp=$(mktemp -d)
suffix=$$
dbs=()
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	for d in "${dbs[@]}"; do psql -q "$PG" -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/relay" .
go build -tags norelay -o "$tmp/norelay" .

# start NAME PORT: a server of the build NAME on a fresh database.
start() {
	local db=paytwice_bench_${1}_$suffix
	psql -q "$PG" -c "CREATE DATABASE $db" >/dev/null
	dbs+=("$db")
	"$tmp/$1" -addr "127.0.0.1:$2" -db "${PG%/*}/$db" -name "$1" >"$tmp/$1.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		if curl -s -o /dev/null "http://127.0.0.1:$2/"; then return; fi
		sleep 0.1
	done
	echo "the $1 server did not start:" >&2
	cat "$tmp/$1.log" >&2
	exit 1
}
start relay "$PORT"
relay_pid=${pids[-1]}
start norelay "$((PORT + 1))"
norelay_pid=${pids[-1]}

bench() { "$tmp/relay" bench -mode new -c "$CLIENTS" -url "http://127.0.0.1:$1" -pid "$2" "${@:3}"; }
field() { awk '$1 == "throughput" { print $2 }'; }
cpu() { awk '$1 == "server" && $2 == "CPU" { print $5 }'; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3), $(psql -Atq "$PG" -c 'SHOW server_version')" >&2
bench "$PORT" "$relay_pid" -n 1000 >/dev/null # warm-up
bench "$((PORT + 1))" "$norelay_pid" -n 1000 >/dev/null

for r in $(seq "$ROUNDS"); do
	with=$(bench "$PORT" "$relay_pid" -d "${SECONDS_EACH}s")
	without=$(bench "$((PORT + 1))" "$norelay_pid" -d "${SECONDS_EACH}s")
	w=$(echo "$with" | field) wo=$(echo "$without" | field)
	echo "$w" >>"$tmp/with"
	echo "$wo" >>"$tmp/without"
	echo "$with" | cpu >>"$tmp/with-cpu"
	echo "$without" | cpu >>"$tmp/without-cpu"
	awk -v a="$w" -v b="$wo" 'BEGIN { printf "%.2f\n", a / b }' >>"$tmp/ratios"
	echo "round $r: with the relay $w/s, without $wo/s" >&2
done

cat <<OUT
| one server on PostgreSQL, $CLIENTS clients, median of $ROUNDS alternating rounds of ${SECONDS_EACH} s | new payments/s | server CPU ms per payment |
| --- | --- | --- |
| with the relay | $(median <"$tmp/with") | $(median <"$tmp/with-cpu") |
| without (-tags norelay) | $(median <"$tmp/without") | $(median <"$tmp/without-cpu") |
| ratio, round by round | $(median <"$tmp/ratios") ($(paste -sd' ' "$tmp/ratios")) | |
OUT
