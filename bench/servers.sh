#!/usr/bin/env bash
# Measures new payments/s and replays/s of paytwice on SQLite with one
# server, on PostgreSQL with one server, and on PostgreSQL with three
# servers sharing one database (one `paytwice bench` per server, all at
# once, their figures summed), and prints the Markdown table of the README's
# "Several servers on one PostgreSQL". A fourth set, three servers built
# with -tags norelay, shows what the live relay adds when the servers
# tell one another every event.
#
# Every set runs in each round, one after another (new payments, then
# replays), so a machine whose speed drifts during the run touches every
# set alike; the table gives the range over the rounds. While one set is
# measured the others are idle. Each set starts on a fresh database (a
# SQLite file, or a database of its own on the same PostgreSQL) and
# everything is removed when the script ends.
#
# Run it from the repository root with a URL whose role may create
# databases:
#
#	PG=postgres://paytwice:paytwice@127.0.0.1:5432/postgres bench/servers.sh
#	ROUNDS=3 SECONDS_EACH=8 PG=… bench/servers.sh
#
# CLIENTS (16) is the clients of a single server, CLIENTS_EACH (6) those of
# each of the three, KEYS (500) the keys paid before replaying them, PORT
# (18100) the first of the fourteen ports it serves on. SETS picks the sets
# measured, in that order (default "sqlite pg1 pg3 pg3norelay").
#
# Each of the three servers of a set runs with GOMAXPROCS=PROCS_EACH, by
# default its share of the machine's cores (nproc/3, at least 1), as
# `paytwice cluster` starts its servers: three Go runtimes each running on
# every core of two spend much of the CPU on switching threads and
# spinning for work. PROCS_EACH=0 leaves each to the runtime's default
# (every core), as servers on machines of their own run. ENV_EACH, such
# as "GOMAXPROCS=2" or "GOGC=200", adds the set pg3env (last, unless SETS
# places it): three servers as in pg3 with those variables added, to
# measure a runtime setting against pg3 in the same rounds. Each round
# also prints the three servers' payments/s and CPU per payment as ratios
# to pg1's. AGAINST=<git revision> adds the set pg3against (last, unless
# SETS places it): three servers as in pg3 built from that revision, to
# measure a change against the build before it in the same rounds. Linux
# only: server CPU comes from /proc.
set -euo pipefail

: "${PG:?set PG to a postgres:// URL whose role may create databases}"
ROUNDS=${ROUNDS:-3}
SECONDS_EACH=${SECONDS_EACH:-8}
CLIENTS=${CLIENTS:-16}
CLIENTS_EACH=${CLIENTS_EACH:-6}
KEYS=${KEYS:-500}
PORT=${PORT:-18100}
SETS=${SETS:-sqlite pg1 pg3 pg3norelay}
ENV_EACH=${ENV_EACH:-}
AGAINST=${AGAINST:-}
PROCS_EACH=${PROCS_EACH:-$(($(nproc) / 3 > 0 ? $(nproc) / 3 : 1))}
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

go build -o "$tmp/paytwice" .
go build -tags norelay -o "$tmp/norelay" .
if [[ -n $AGAINST ]]; then
	mkdir "$tmp/against"
	git archive "$AGAINST" | tar -x -C "$tmp/against"
	(cd "$tmp/against" && go build -o "$tmp/againstbuild" .)
	rm -rf "$tmp/against"
fi

# database SET: a fresh PostgreSQL database for SET, its URL in $url.
database() {
	local db=paytwice_bench_${1}_$suffix
	psql -q "$PG" -c "CREATE DATABASE $db" >/dev/null
	dbs+=("$db")
	url=${PG%/*}/$db
}

# start SET BUILD NAME PORT DB [VAR=VALUE…]: one server of SET, run with
# those variables in its environment, its port and pid noted.
declare -A ports serverpids clients
start() {
	local set=$1 build=$2 name=$3 port=$4 db=$5
	env "${@:6}" "$tmp/$build" -addr "127.0.0.1:$port" -db "$db" -name "$name" >"$tmp/$set-$name.log" 2>&1 &
	pids+=($!)
	ports[$set]+="$port "
	serverpids[$set]+="$! "
	for _ in $(seq 100); do
		if curl -s -o /dev/null "http://127.0.0.1:$port/"; then return; fi
		sleep 0.1
	done
	echo "server $name of $set did not start:" >&2
	cat "$tmp/$set-$name.log" >&2
	exit 1
}

read -ra sets <<<"$SETS"
if [[ -n $ENV_EACH && " ${sets[*]} " != *" pg3env "* ]]; then sets+=(pg3env); fi
if [[ -n $AGAINST && " ${sets[*]} " != *" pg3against "* ]]; then sets+=(pg3against); fi
for set in "${sets[@]}"; do
	case $set in
	sqlite) start sqlite paytwice s1 "$PORT" "$tmp/paytwice.db" ;;
	pg1) database pg1 && start pg1 paytwice s1 "$((PORT + 1))" "$url" ;;
	pg3)
		database pg3
		for i in 1 2 3; do start pg3 paytwice "s$i" "$((PORT + 1 + i))" "$url" "${procs[@]}"; done
		;;
	pg3norelay)
		database pg3norelay
		for i in 1 2 3; do start pg3norelay norelay "s$i" "$((PORT + 4 + i))" "$url" "${procs[@]}"; done
		;;
	pg3env)
		: "${ENV_EACH:?set ENV_EACH for the set pg3env}"
		read -ra vars <<<"$ENV_EACH"
		database pg3env
		for i in 1 2 3; do start pg3env paytwice "s$i" "$((PORT + 7 + i))" "$url" "${procs[@]}" "${vars[@]}"; done
		;;
	pg3against)
		: "${AGAINST:?set AGAINST for the set pg3against}"
		database pg3against
		for i in 1 2 3; do start pg3against againstbuild "s$i" "$((PORT + 10 + i))" "$url" "${procs[@]}"; done
		;;
	*) echo "unknown set $set (sqlite, pg1, pg3, pg3norelay, pg3env, pg3against)" >&2 && exit 2 ;;
	esac
	case $set in sqlite | pg1) clients[$set]=$CLIENTS ;; *) clients[$set]=$CLIENTS_EACH ;; esac
done

# measure SET ARGS…: one `paytwice bench` per server of SET, all at once;
# prints the summed requests/s and the servers' CPU per request in ms.
measure() {
	local set=$1 i=0 port
	local -a ps srv
	read -ra srv <<<"${serverpids[$set]}"
	for port in ${ports[$set]}; do
		"$tmp/paytwice" bench -c "${clients[$set]}" -url "http://127.0.0.1:$port" -pid "${srv[$i]}" "${@:2}" >"$tmp/out-$i" &
		ps+=($!)
		i=$((i + 1))
	done
	for p in "${ps[@]}"; do
		if ! wait "$p"; then
			echo "a bench against $set failed:" >&2
			cat "$tmp"/out-* >&2
			exit 1
		fi
	done
	for ((j = 0; j < i; j++)); do cat "$tmp/out-$j"; done | awk '
		$1 == "requests" { n += $2 }
		$1 == "throughput" { t += $2 }
		$1 == "server" && $2 == "CPU" { cpu += $3 }
		END { printf "%.0f %.2f\n", t, n ? cpu * 1000 / n : 0 }'
}

# range: "min – max" of the numbers on stdin, with thousands separators.
range() {
	sort -g | awk -v d="${1:-0}" '
		function f(x,   s, r) {
			if (d > 0) return sprintf("%." d "f", x)
			s = sprintf("%.0f", x); r = ""
			while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
			return s r
		}
		{ a[NR] = $1 }
		END { print (a[1] == a[NR]) ? f(a[1]) : f(a[1]) " – " f(a[NR]) }'
}

machine() { echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"; }
echo "machine: $(machine), $(go version | cut -d' ' -f3), PostgreSQL $(psql -Atq "$PG" -c 'SHOW server_version'), three servers each with ${procs[*]:-the runtime default GOMAXPROCS}" >&2
for set in "${sets[@]}"; do measure "$set" -mode new -n 300 >/dev/null; done # warm-up

for r in $(seq "$ROUNDS"); do
	for set in "${sets[@]}"; do
		new=$(measure "$set" -mode new -d "${SECONDS_EACH}s")
		replay=$(measure "$set" -mode replay -keys "$KEYS" -d "${SECONDS_EACH}s")
		read -r pay paycpu <<<"$new"
		read -r rep repcpu <<<"$replay"
		echo "$pay" >>"$tmp/$set-new"
		echo "$paycpu" >>"$tmp/$set-newcpu"
		echo "$rep" >>"$tmp/$set-replay"
		echo "round $r, $set: $pay new payments/s ($paycpu ms server CPU each), $rep replays/s ($repcpu ms each)" >&2
	done
	if [[ -s $tmp/pg1-new ]]; then
		for set in pg3 pg3norelay pg3env pg3against; do
			[[ -s $tmp/$set-new ]] || continue
			paste <(tail -1 "$tmp/$set-new") <(tail -1 "$tmp/pg1-new") <(tail -1 "$tmp/$set-newcpu") <(tail -1 "$tmp/pg1-newcpu") |
				awk -v r="$r" -v s="$set" '$2 > 0 && $4 > 0 { printf "round %d, %s against pg1: %.2fx the payments/s, %.2fx the CPU per payment\n", r, s, $1 / $2, $3 / $4 }' >&2
		done
	fi
done
echo "machine at the end: $(machine)" >&2

row() {
	[[ -s $tmp/$2-new ]] || return 0
	echo "| $1 | $(range <"$tmp/$2-new")${3-} | $(range <"$tmp/$2-replay")${4-} | $(range 2 <"$tmp/$2-newcpu") ms |"
}
echo "| $ROUNDS rounds of ${SECONDS_EACH} s in one run | new payments/s | replays/s | server CPU per new payment |"
echo "| --- | --- | --- | --- |"
row "SQLite, one server, $CLIENTS clients" sqlite
row "PostgreSQL, one server, $CLIENTS clients" pg1
row "PostgreSQL, three servers, $CLIENTS_EACH clients each${procs:+, $procs}" pg3 " (all three together)" " (together)"
row "the same, built with \`-tags norelay\`" pg3norelay " (together)" " (together)"
row "the same, each server with $ENV_EACH" pg3env " (together)" " (together)"
row "the same, built from $AGAINST" pg3against " (together)" " (together)"
