#!/usr/bin/env bash
# A year of keys: new payments and replays on a server whose database holds
# ten million keys (written by bench/bigdb), beside a server on an empty
# database, in alternating rounds (big, empty, empty, big, …), and the
# ratios round by round: payments/s, replays/s and the server's CPU per
# payment (from /proc).
#
#	go run ./bench/bigdb -db /tmp/big.db -keys 10000000      # once, 9 min
#	BIG=/tmp/big.db bench/yearofkeys.sh
#	BIG=postgres://…/bigdb EMPTY=postgres://…/emptydb bench/yearofkeys.sh
#
# Both servers keep keys for a year (-retention 9000h, past the year bench/bigdb spreads them over), so that no prune
# runs during the rounds. Replays are of keys the round paid (-keys 500):
# recent keys, as a client's retries are, answered from the replay cache.
# A replay of a key older than the cache's 100,000 reads the file: see
# BenchmarkClaimOnBigFile (go test ./store) for that cost at this size.
#
# ROUNDS (4), SECONDS_EACH (6), CLIENTS (16), PORT (18700) and PORT+1.
# With a SQLite BIG the empty server's file is made in a temporary folder;
# with PostgreSQL, EMPTY names a database for it (emptied first).
set -euo pipefail

BIG=${BIG:?BIG must name the big database (bench/bigdb)}
EMPTY=${EMPTY:-}
ROUNDS=${ROUNDS:-4}
SECONDS_EACH=${SECONDS_EACH:-6}
CLIENTS=${CLIENTS:-16}
PORT=${PORT:-18700}

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/paytwice" .
if [ -z "$EMPTY" ]; then
	EMPTY=$tmp/empty.db
else
	psql -q "$EMPTY" -c 'DROP SCHEMA IF EXISTS public CASCADE; DROP SCHEMA IF EXISTS gateway CASCADE; CREATE SCHEMA public' >/dev/null
fi

declare -A port pid
start() {
	local name=$1 db=$2 p=$3
	"$tmp/paytwice" -addr "127.0.0.1:$p" -db "$db" -retention 9000h >"$tmp/$name.log" 2>&1 &
	pids+=($!)
	pid[$name]=$!
	port[$name]=$p
	for _ in $(seq 300); do
		if curl -s -o /dev/null "http://127.0.0.1:$p/v1/idempotency-policy"; then return; fi
		sleep 0.1
	done
	echo "server $name did not start:" >&2
	cat "$tmp/$name.log" >&2
	exit 1
}
start big "$BIG" "$PORT"
start empty "$EMPTY" "$((PORT + 1))"

measure() { # name, then bench flags; prints requests/s and server ms per request
	"$tmp/paytwice" bench -c "$CLIENTS" -url "http://127.0.0.1:${port[$1]}" -pid "${pid[$1]}" "${@:2}" | awk '
		$1 == "requests" { n = $2 }
		$1 == "throughput" { t = $2 }
		$1 == "server" && $2 == "CPU" { cpu = $3 }
		END { printf "%.0f %.3f\n", t, n ? cpu * 1000 / n : 0 }'
}
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "load at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for name in big empty; do measure "$name" -mode new -n 500 >/dev/null; done # warm-up
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then order="big empty"; else order="empty big"; fi
	declare -A new cpu rep
	for name in $order; do
		read -r new[$name] cpu[$name] <<<"$(measure "$name" -mode new -d "${SECONDS_EACH}s")"
		read -r rep[$name] _ <<<"$(measure "$name" -mode replay -keys 500 -d "${SECONDS_EACH}s")"
	done
	rn=$(awk -v a="${new[big]}" -v b="${new[empty]}" 'BEGIN { printf "%.3f", a / b }')
	rc=$(awk -v a="${cpu[big]}" -v b="${cpu[empty]}" 'BEGIN { printf "%.3f", a / b }')
	rr=$(awk -v a="${rep[big]}" -v b="${rep[empty]}" 'BEGIN { printf "%.3f", a / b }')
	echo "$rn" >>"$tmp/rn"; echo "$rc" >>"$tmp/rc"; echo "$rr" >>"$tmp/rr"
	echo "round $r: new ${new[big]}/s against ${new[empty]}/s = $rn (CPU ${cpu[big]} against ${cpu[empty]} ms = $rc); replays ${rep[big]}/s against ${rep[empty]}/s = $rr"
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "median over $ROUNDS rounds, big over empty: new payments/s $(median <"$tmp/rn"), server CPU per payment $(median <"$tmp/rc"), replays/s $(median <"$tmp/rr")"
