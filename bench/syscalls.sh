#!/usr/bin/env bash
# Counts the system calls a new payment costs the server: the server runs
# under `perf stat` once with no payment and once with N payments (16
# clients), and the difference is divided by N. Figures that survive a
# change of machine, unlike payments per second: all system calls, the
# writes to sockets and files (write, writev, pwrite64, sendto, sendmsg),
# the reads, and the fsyncs.
#
# Run it from the repository root; PG, if set, measures a server on a fresh
# PostgreSQL database too:
#
#	bench/syscalls.sh
#	N=5000 PG=postgres://paytwice:paytwice@127.0.0.1:5432/postgres bench/syscalls.sh
#
# Needs perf (linux-tools) with tracepoints readable by this user
# (kernel.perf_event_paranoid ≤ 2 for one's own processes is enough).
set -euo pipefail

N=${N:-3000}
PORT=${PORT:-18095}
URL=http://127.0.0.1:$PORT
events=raw_syscalls:sys_enter,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_pwrite64,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync

tmp=$(mktemp -d)
dbs=()
cleanup() {
	for d in "${dbs[@]}"; do psql -q "$PG" -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/paytwice" .

# run DB COUNT: the server's counts over its whole life, COUNT payments in it.
run() {
	local db=$1 count=$2
	perf stat -x, -e "$events" -o "$tmp/stat" -- "$tmp/paytwice" -addr "127.0.0.1:$PORT" -db "$db" >"$tmp/server.log" 2>&1 &
	local perfpid=$!
	for _ in $(seq 100); do
		if curl -s -o /dev/null "$URL/v1/idempotency-policy"; then break; fi
		sleep 0.1
	done
	if [ "$count" -gt 0 ]; then "$tmp/paytwice" bench -url "$URL" -c 16 -n "$count" >/dev/null; fi
	pkill -TERM -P "$perfpid" -x paytwice || true
	wait "$perfpid" || true
	awk -F, '$3 != "" { split($3, e, ":"); print e[2], $1 }' "$tmp/stat"
}

# measure NAME DB1 DB2: a row of the table, from one run without payments
# on DB1 and one with N payments on DB2.
measure() {
	run "$2" 0 >"$tmp/base"
	run "$3" "$N" >"$tmp/load"
	awk -v n="$N" -v name="$1" '
		NR == FNR { base[$1] = $2; next }
		{ d[$1] = ($2 - base[$1]) / n }
		END {
			printf "| %s | %.1f | %.1f | %.1f | %.1f |\n", name, d["sys_enter"],
				d["sys_enter_write"] + d["sys_enter_writev"] + d["sys_enter_pwrite64"] + d["sys_enter_sendto"] + d["sys_enter_sendmsg"],
				d["sys_enter_read"] + d["sys_enter_recvfrom"], d["sys_enter_fsync"] + d["sys_enter_fdatasync"]
		}' "$tmp/base" "$tmp/load"
}

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3)" >&2
echo "| per new payment, 16 clients, $N payments | system calls | writes | reads | fsyncs |"
echo "| --- | --- | --- | --- | --- |"
measure SQLite "$tmp/a.db" "$tmp/b.db"
if [ -n "${PG:-}" ]; then
	for s in a b; do
		d=paytwice_syscalls_${s}_$$
		psql -q "$PG" -c "CREATE DATABASE $d" >/dev/null
		dbs+=("$d")
	done
	measure PostgreSQL "${PG%/*}/${dbs[0]}" "${PG%/*}/${dbs[1]}"
fi
