#!/usr/bin/env bash
# Measures what the live relay (web/room/relay.go) costs servers that share one
# PostgreSQL database: three servers built as usual (each sends its events
# to the others and draws theirs) against three built with -tags norelay
# (each shows only its own requests), in alternating rounds of one run,
# with the ratios taken round by round, so a machine whose speed drifts
# still gives a fair comparison. Each set of servers has a fresh database
# of its own on the same PostgreSQL; while one set is measured the other
# is idle. Every server has a live page's projector running, as in a
# class (the start-up check opens its checkout page). PostgreSQL's CPU
# per payment is that of the backends serving each set's database (read
# from /proc: PostgreSQL on this machine), since the relay's
# notifications cost the database too.
#
# Run it from the repository root with a URL whose role may create
# databases:
#
#	PG=postgres://paytwice:paytwice@127.0.0.1:5432/postgres bench/relay.sh
#	ROUNDS=5 SECONDS_EACH=8 SERVERS=3 CLIENTS_EACH=6 PG=… bench/relay.sh
#
# Each server runs with GOMAXPROCS=PROCS_EACH, by default its share of the
# machine's cores (nproc/SERVERS, at least 1), as paytwice cluster starts
# its servers; PROCS_EACH=0 leaves each to the runtime's default.
#
# With AGAINST=<git revision> the other set is that revision's build, with
# its relay, instead of -tags norelay: what a change to the relay costs.
#
# Linux only: server CPU comes from /proc.
set -euo pipefail

: "${PG:?set PG to a postgres:// URL whose role may create databases}"
ROUNDS=${ROUNDS:-5}
SECONDS_EACH=${SECONDS_EACH:-8}
SERVERS=${SERVERS:-3}
CLIENTS_EACH=${CLIENTS_EACH:-6}
PORT=${PORT:-18090}
PROCS_EACH=${PROCS_EACH:-$(($(nproc) / SERVERS > 0 ? $(nproc) / SERVERS : 1))}
procs=()
if [[ $PROCS_EACH != 0 ]]; then procs=("GOMAXPROCS=$PROCS_EACH"); fi

tmp=$(mktemp -d)
suffix=$$
dbs=()
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for d in "${dbs[@]}"; do psql -q "$PG" -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/relay" .
if [ -n "${AGAINST:-}" ]; then
	# The other set is an earlier build, relay and all: what a change costs.
	mkdir "$tmp/against"
	git archive "$AGAINST" | tar -x -C "$tmp/against"
	(cd "$tmp/against" && go build -o "$tmp/norelay" .)
	rm -rf "$tmp/against"
	other="built from $AGAINST"
else
	go build -tags norelay -o "$tmp/norelay" .
	other="without (-tags norelay)"
fi

# start BUILD FIRSTPORT: SERVERS servers of BUILD on a fresh database, on
# ports FIRSTPORT and up; their pids go to $tmp/BUILD.pids.
start() {
	local db=paytwice_bench_${1}_$suffix i port
	psql -q "$PG" -c "CREATE DATABASE $db" >/dev/null
	dbs+=("$db")
	# Bounded pools, so that every server's connections fit in
	# PostgreSQL's default max_connections (as paytwice cluster does).
	for ((i = 1; i <= SERVERS; i++)); do
		port=$(($2 + i - 1))
		env "${procs[@]}" "$tmp/$1" -addr "127.0.0.1:$port" -db "${PG%/*}/$db?pool_max_conns=10" -name "s$i" >"$tmp/$1-s$i.log" 2>&1 &
		pids+=($!)
		echo "$port $!" >>"$tmp/$1.servers"
	done
	while read -r port _; do
		for _ in $(seq 100); do
			if curl -s -o /dev/null "http://127.0.0.1:$port/"; then continue 2; fi
			sleep 0.1
		done
		echo "a $1 server did not start:" >&2
		cat "$tmp/$1"-s*.log >&2
		exit 1
	done <"$tmp/$1.servers"
}
start relay "$PORT"
start norelay "$((PORT + SERVERS))"

# pgticks BUILD: the CPU ticks of the PostgreSQL backends serving BUILD's
# database, the servers' listening connections included (the WAL writer
# and checkpointer, shared, are left out).
pgticks() {
	local t=0 p
	for p in $(psql -qtA "$PG" -c "SELECT pid FROM pg_stat_activity WHERE datname = 'paytwice_bench_${1}_$suffix'"); do
		t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
	done
	echo "$t"
}

# measure BUILD ARGS…: one `paytwice bench` per server of BUILD, all at
# once; prints the summed new payments/s, the servers' CPU per payment
# and PostgreSQL's (its backends for BUILD), in ms.
measure() {
	local build=$1 i=0 port pid t0 t1
	local -a ps
	t0=$(pgticks "$build")
	while read -r port pid; do
		"$tmp/relay" bench -mode new -c "$CLIENTS_EACH" -url "http://127.0.0.1:$port" -pid "$pid" "${@:2}" >"$tmp/out-$i" &
		ps+=($!)
		i=$((i + 1))
	done <"$tmp/$build.servers"
	for p in "${ps[@]}"; do
		if ! wait "$p"; then
			echo "a bench against $build failed:" >&2
			cat "$tmp"/out-* >&2
			exit 1
		fi
	done
	t1=$(pgticks "$build")
	for ((j = 0; j < i; j++)); do cat "$tmp/out-$j"; done | awk -v pg=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" '
		$1 == "requests" { n += $2 }
		$1 == "throughput" { t += $2 }
		$1 == "server" && $2 == "CPU" { cpu += $3 }
		END { printf "%.0f %.3f %.3f\n", t, n ? cpu * 1000 / n : 0, n ? pg * 1000 / hz / n : 0 }'
}
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3), PostgreSQL $(psql -Atq "$PG" -c 'SHOW server_version'), each server with ${procs[*]:-the runtime default GOMAXPROCS}" >&2
measure relay -n 300 >/dev/null # warm-up
measure norelay -n 300 >/dev/null

for r in $(seq "$ROUNDS"); do
	read -r w wcpu wpg <<<"$(measure relay -d "${SECONDS_EACH}s")"
	read -r wo wocpu wopg <<<"$(measure norelay -d "${SECONDS_EACH}s")"
	echo "$w" >>"$tmp/with"
	echo "$wo" >>"$tmp/without"
	echo "$wcpu" >>"$tmp/with-cpu"
	echo "$wocpu" >>"$tmp/without-cpu"
	echo "$wpg" >>"$tmp/with-pg"
	echo "$wopg" >>"$tmp/without-pg"
	awk -v a="$w" -v b="$wo" 'BEGIN { printf "%.2f\n", a / b }' >>"$tmp/ratios"
	awk -v a="$wcpu" -v b="$wocpu" 'BEGIN { printf "%.2f\n", a / b }' >>"$tmp/cpu-ratios"
	awk -v a="$wpg" -v b="$wopg" 'BEGIN { printf "%.2f\n", (b > 0 ? a / b : 0) }' >>"$tmp/pg-ratios"
	echo "round $r: with the relay $w/s ($wcpu ms each, PostgreSQL $wpg ms), $other $wo/s ($wocpu ms each, PostgreSQL $wopg ms)" >&2
done
echo "machine at the end: load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

cat <<OUT
| $SERVERS servers on one PostgreSQL, $CLIENTS_EACH clients each, median of $ROUNDS alternating rounds of ${SECONDS_EACH} s | new payments/s (together) | server CPU ms per payment (together) | PostgreSQL's CPU ms per payment (its backends) |
| --- | --- | --- | --- |
| with the relay | $(median <"$tmp/with") | $(median <"$tmp/with-cpu") | $(median <"$tmp/with-pg") |
| $other | $(median <"$tmp/without") | $(median <"$tmp/without-cpu") | $(median <"$tmp/without-pg") |
| ratio, round by round | $(median <"$tmp/ratios") ($(paste -sd' ' "$tmp/ratios")) | $(median <"$tmp/cpu-ratios") ($(paste -sd' ' "$tmp/cpu-ratios")) | $(median <"$tmp/pg-ratios") ($(paste -sd' ' "$tmp/pg-ratios")) |
OUT
