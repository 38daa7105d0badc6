#!/usr/bin/env bash
# Measures paytwice side by side with bench/minimal, the smallest server
# doing the same durable work, in one run and in alternating rounds
# (minimal, paytwice, minimal, paytwice, …), each server on a fresh
# database of its own, and prints the ratios round by round:
#
#   - new payments/s with CLIENTS (16) clients, and the server's CPU per
#     payment (from /proc), and PostgreSQL's (every postgres process's CPU
#     over the round, divided by the payments; PostgreSQL only);
#   - a storm of 1,000 requests with one key while 8 other clients pay
#     (STORMS storms a round): the slowest storm fully answered, and how
#     many fresh 201s each storm got.
#
# PAGE=1 opens paytwice's checkout page once before the rounds, so that
# its live pages' read model follows every payment, unwatched, as on a
# server whose pages were opened and closed; without it paytwice serves
# the API only, as the minimal server does.
#
# NORELAY=1 adds a third server, paytwice built with -tags norelay (no
# live relay between servers), to show what the relay costs one server.
#
# VARIANT_SQL='…' (PostgreSQL only) adds a server named variant: paytwice
# whose database, once migrated, is changed by that SQL, such as an index
# dropped or built another way, to measure a schema change beside the
# current one before writing its migration:
#
#	VARIANT_SQL='DROP INDEX charges_scope_order' PGSSLMODE=disable PG=… bench/minimal.sh
#
# BASE=path adds a server named base: another paytwice binary, such as
# one built from an earlier commit, to measure a change beside the build
# before it, in the same rounds (PORT+4):
#
#	git worktree add /tmp/before HEAD~1 && (cd /tmp/before && go build -o /tmp/paytwice-before .)
#	BASE=/tmp/paytwice-before PGSSLMODE=disable PG=… bench/minimal.sh
#
# Run it from the repository root:
#
#	PG=postgres://paytwice:paytwice@127.0.0.1:5432/postgres bench/minimal.sh   # PostgreSQL
#	bench/minimal.sh                                                          # SQLite
#	ROUNDS=5 SECONDS_EACH=8 PG=… bench/minimal.sh
#
# With PG set, its role must be allowed to create databases; those it
# creates are dropped at the end. PORT (18200) and PORT+1 are served on
# (PORT+2 with NORELAY, PORT+3 with VARIANT_SQL, PORT+4 with BASE).
# Linux only.
set -euo pipefail

ROUNDS=${ROUNDS:-4}
SECONDS_EACH=${SECONDS_EACH:-6}
CLIENTS=${CLIENTS:-16}
STORMS=${STORMS:-3}
PORT=${PORT:-18200}
PG=${PG:-}
store=SQLite
if [ -n "$PG" ]; then store=PostgreSQL; fi

tmp=$(mktemp -d)
suffix=$$
pids=()
dbs=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for d in "${dbs[@]}"; do
		# FORCE cannot end an autovacuum worker for a role that is not a
		# superuser; a plain DROP ends it by itself.
		psql -q "$PG" -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 ||
			psql -q "$PG" -c "DROP DATABASE IF EXISTS $d" >/dev/null 2>&1 || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/paytwice" .
go build -o "$tmp/minimal" ./bench/minimal
names=(minimal paytwice)
if [ -n "${NORELAY:-}" ]; then
	go build -tags norelay -o "$tmp/norelay" .
	names+=(norelay)
fi
if [ -n "${VARIANT_SQL:-}" ]; then
	if [ -z "$PG" ]; then
		echo "VARIANT_SQL needs PG: it changes a PostgreSQL database" >&2
		exit 2
	fi
	names+=(variant)
fi
if [ -n "${BASE:-}" ]; then
	if [ ! -x "$BASE" ]; then
		echo "BASE=$BASE is not an executable paytwice binary" >&2
		exit 2
	fi
	cp "$BASE" "$tmp/base"
	names+=(base)
fi

# where NAME: a fresh database for NAME in $db (a URL, or a file in $tmp).
# It sets a variable rather than printing: called in $(…) it would note the
# database in a subshell's copy of dbs, and the cleanup would not drop it.
where() {
	if [ -z "$PG" ]; then
		db=$tmp/$1.db
		return
	fi
	local name=paytwice_minimal_${1}_$suffix
	psql -q "$PG" -c "CREATE DATABASE $name" >/dev/null
	dbs+=("$name")
	db=${PG%/*}/$name
}

declare -A port pid
# start NAME PORT PROBE COMMAND…: PROBE is a path that answers once the
# server is up. paytwice's is an API path: its checkout page would start
# the live pages' read model, which a server that only serves the API
# never runs (PAGE=1 opens that page once, for a server whose pages were
# opened before and are closed now).
start() {
	local name=$1 p=$2 probe=$3
	shift 3
	"$@" >"$tmp/$name.log" 2>&1 &
	pids+=($!)
	pid[$name]=$!
	port[$name]=$p
	for _ in $(seq 100); do
		if curl -s -o /dev/null "http://127.0.0.1:$p$probe"; then return; fi
		sleep 0.1
	done
	echo "$name did not start:" >&2
	cat "$tmp/$name.log" >&2
	exit 1
}
where minimal
start minimal $((PORT + 1)) / "$tmp/minimal" -addr "127.0.0.1:$((PORT + 1))" -db "$db"
where paytwice
start paytwice "$PORT" /v1/idempotency-policy "$tmp/paytwice" -addr "127.0.0.1:$PORT" -db "$db"
if [ -n "${NORELAY:-}" ]; then
	where norelay
	start norelay $((PORT + 2)) /v1/idempotency-policy "$tmp/norelay" -addr "127.0.0.1:$((PORT + 2))" -db "$db"
fi
if [ -n "${VARIANT_SQL:-}" ]; then
	where variant
	# The probe's answer means the migrations are done: the server
	# listens first, but serves only once its store is open, and the
	# probe's connection waits in the listen queue until then.
	start variant $((PORT + 3)) /v1/idempotency-policy "$tmp/paytwice" -addr "127.0.0.1:$((PORT + 3))" -db "$db"
	psql -q -v ON_ERROR_STOP=1 "$db" -c "$VARIANT_SQL" >/dev/null
fi
if [ -n "${BASE:-}" ]; then
	where base
	start base $((PORT + 4)) /v1/idempotency-policy "$tmp/base" -addr "127.0.0.1:$((PORT + 4))" -db "$db"
fi
if [ -n "${PAGE:-}" ]; then
	for name in "${names[@]}"; do
		[ "$name" = minimal ] || curl -s -o /dev/null "http://127.0.0.1:${port[$name]}/"
	done
fi

bench() { # NAME ARGS…
	local name=$1
	shift
	"$tmp/paytwice" bench -url "http://127.0.0.1:${port[$name]}" -pid "${pid[$name]}" "$@"
}
# pgticks NAME: the CPU ticks of the PostgreSQL backends serving NAME's
# database (0 without PG). Other databases' work on the same PostgreSQL
# is left out; the WAL writer and checkpointer, shared, are too.
pgticks() {
	if [ -z "$PG" ]; then echo 0; return; fi
	local t=0 p
	for p in $(psql -qtA "$PG" -c "SELECT pid FROM pg_stat_activity WHERE datname = 'paytwice_minimal_${1}_$suffix'"); do
		t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
	done
	echo "$t"
}
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3), store: $store${PAGE:+, with paytwice checkout page opened once}" >&2
for name in "${names[@]}"; do bench "$name" -mode new -c "$CLIENTS" -n 2000 >/dev/null; done # warm-up

for n in "${names[@]}"; do : >"$tmp/tput.$n" && : >"$tmp/cpu.$n" && : >"$tmp/pgcpu.$n" && : >"$tmp/storm.$n"; done
for r in $(seq "$ROUNDS"); do
	declare -A tput=() cpu=() pgcpu=() storm=() fresh=()
	# Every other round in the opposite order, so that a drift of the
	# machine's speed within a round favours neither.
	order=("${names[@]}")
	if [ $((r % 2)) = 0 ]; then order=($(printf '%s\n' "${names[@]}" | tac)); fi
	for name in "${order[@]}"; do
		t0=$(pgticks "$name")
		out=$(bench "$name" -mode new -c "$CLIENTS" -d "${SECONDS_EACH}s")
		t1=$(pgticks "$name")
		tput[$name]=$(echo "$out" | awk '$1 == "throughput" { print $2 }')
		# The server's CPU over the run divided by its payments here, to
		# four places: the per-request figure the load generator prints is
		# rounded to 0.01 ms, a few percent of a payment's.
		cpu[$name]=$(echo "$out" | awk '$1 == "requests" { n = $2 } $1 == "server" && $2 == "CPU" { printf "%.4f", n ? $3 * 1000 / n : 0 }')
		ok=$(echo "$out" | awk '$1 == "requests" { print $2 }')
		pgcpu[$name]=$(awk -v t=$((t1 - t0)) -v n="$ok" 'BEGIN { printf "%.3f", n ? t * 10 / n : 0 }')
		# A storm under load: 8 clients pay while the storms run. The
		# load generator is started itself, not through the bench
		# function: $! would then be a subshell, and killing it would
		# leave the load running for its 30 s, into the next rounds.
		"$tmp/paytwice" bench -url "http://127.0.0.1:${port[$name]}" -mode new -c 8 -d 30s >/dev/null 2>&1 &
		load=$!
		sleep 1
		s=$(bench "$name" -mode storm -c 1000 -n "$STORMS")
		kill "$load" 2>/dev/null || true
		wait "$load" 2>/dev/null || true
		storm[$name]=$(echo "$s" | awk '$1 == "storms" { print $(NF-1) }')
		fresh[$name]=$(echo "$s" | awk '$1 == "fresh" { print $3 }')
	done
	line="round $r (load $(cut -d' ' -f1 /proc/loadavg)):"
	for n in "${names[@]}"; do
		[ "$n" = minimal ] && continue
		awk -v p="${tput[$n]}" -v m="${tput[minimal]}" 'BEGIN { printf "%.2f\n", p / m }' >>"$tmp/tput.$n"
		awk -v p="${cpu[$n]}" -v m="${cpu[minimal]}" 'BEGIN { printf "%.2f\n", p / m }' >>"$tmp/cpu.$n"
		awk -v p="${pgcpu[$n]}" -v m="${pgcpu[minimal]}" 'BEGIN { printf "%.2f\n", (m > 0 ? p / m : 0) }' >>"$tmp/pgcpu.$n"
		awk -v p="${storm[$n]}" -v m="${storm[minimal]}" 'BEGIN { printf "%.2f\n", p / m }' >>"$tmp/storm.$n"
	done
	for n in "${names[@]}"; do
		line+=" $n ${tput[$n]}/s, CPU ${cpu[$n]} ms, PostgreSQL CPU ${pgcpu[$n]} ms, storm ${storm[$n]} ms (fresh ${fresh[$n]});"
	done
	echo "$line" >&2
done

echo "| $store, $ROUNDS alternating rounds, over bench/minimal | median | rounds |"
echo "| --- | --- | --- |"
for n in "${names[@]}"; do
	[ "$n" = minimal ] && continue
	row() { echo "| $n: $1 | **$(median <"$tmp/$2.$n")×** | $(paste -sd' ' "$tmp/$2.$n") |"; }
	row "new payments/s, $CLIENTS clients" tput
	row "server CPU per payment" cpu
	if [ -n "$PG" ]; then row "PostgreSQL's CPU per payment (its backends for this server)" pgcpu; fi
	row "slowest of $STORMS storms of 1,000 requests with one key, 8 clients paying meanwhile" storm
done
