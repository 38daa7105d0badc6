#!/usr/bin/env bash
# Measures what live pages cost the server: new payments at a classroom's
# pace (RATE a second, 40 by default) with no page open and with VIEWERS
# (200) open event streams, in alternating rounds on one server, and prints
# the server's CPU per payment for each, their ratio round by round, and how
# long a payment's 201 took to reach the pages (p50/p99 over the rounds
# with viewers). The viewers run in the load generator's process, as
# phones would on their own; only the server's CPU is counted.
#
# Run it from the repository root:
#
#	bench/viewers.sh                       # 3 rounds of 10 s each
#	ROUNDS=5 SECONDS_EACH=15 VIEWERS=200 RATE=40 bench/viewers.sh
#	VIEWERS=500 FULL=1 bench/viewers.sh    # the lecture hall
#
# Each round also notes the server's resident memory (VmRSS) with the
# viewers open, and the run ends with its peak (VmHWM). FULL=1 adds, to
# each round, 16 clients paying as fast as they can with no page open and
# with VIEWERS open, and their ratio of payments/s.
#
# It builds the binary into a temporary folder, serves on 127.0.0.1:18090
# (PORT to change it) over a fresh database file, and removes everything
# when it ends. Linux only: server CPU comes from /proc.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECONDS_EACH=${SECONDS_EACH:-10}
VIEWERS=${VIEWERS:-200}
RATE=${RATE:-40}
PORT=${PORT:-18090}
URL=http://127.0.0.1:$PORT

tmp=$(mktemp -d)
server=
cleanup() {
	if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/paytwice" .
# Every viewer comes from this one address, where a lecture hall's phones
# come from hundreds: the room's share per address is raised to let them in.
"$tmp/paytwice" -addr "127.0.0.1:$PORT" -db "$tmp/paytwice.db" \
	-limits "streams=$((VIEWERS + 100)),streams-per-address=$((VIEWERS + 50)),stream-opens=$((VIEWERS + 50))/1ms" >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
	if curl -s -o /dev/null "$URL/"; then break; fi
	sleep 0.1
done

FULL=${FULL:-}
full() { "$tmp/paytwice" bench -url "$URL" -pid "$server" -c 16 -d "${SECONDS_EACH}s" "$@" | awk '$1 == "throughput" { print $2 }'; }
rss() { awk '$1 == "VmRSS:" { printf "%.0f\n", $2 / 1024 }' "/proc/$server/status"; }
bench() { "$tmp/paytwice" bench -url "$URL" -pid "$server" -c 8 -rate "$RATE" -d "${SECONDS_EACH}s" "$@"; }
cpu() { awk '$1 == "server" && $2 == "CPU" { print $5 }'; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3)" >&2
bench -viewers 1 -d 3s >/dev/null # warm-up: page cache, the live model, connections

: >"$tmp/none"
: >"$tmp/watched"
: >"$tmp/ratios"
: >"$tmp/p50"
: >"$tmp/p99"
: >"$tmp/full"
: >"$tmp/rss"
for r in $(seq "$ROUNDS"); do
	a=$(bench)
	b=$(bench -viewers "$VIEWERS" & sleep $((SECONDS_EACH - 1)); rss >"$tmp/rss-now"; wait)
	cat "$tmp/rss-now" >>"$tmp/rss"
	fr=
	if [ -n "$FULL" ]; then
		if [ $((r % 2)) = 1 ]; then f0=$(full); f1=$(full -viewers "$VIEWERS"); else f1=$(full -viewers "$VIEWERS"); f0=$(full); fi
		fr=$(awk -v a="$f0" -v b="$f1" 'BEGIN { printf "%.2f", b / a }')
		echo "$fr" >>"$tmp/full"
		fr="; 16 clients flat out: $f0/s with no page, $f1/s with $VIEWERS ($fr)"
	fi
	ca=$(echo "$a" | cpu)
	cb=$(echo "$b" | cpu)
	echo "$ca" >>"$tmp/none"
	echo "$cb" >>"$tmp/watched"
	awk -v a="$ca" -v b="$cb" 'BEGIN { printf "%.2f\n", b / a }' >>"$tmp/ratios"
	echo "$b" | awk '$1 == "201→viewer" { print $3 }' >>"$tmp/p50"
	echo "$b" | awk '$1 == "201→viewer" { print $6 }' >>"$tmp/p99"
	echo "round $r: no viewers $ca ms/payment, $VIEWERS viewers $cb ms/payment, server RSS $(cat "$tmp/rss-now") MB; $(echo "$b" | grep -E '^(201→viewer|viewers) ' | tr '\n' ' ')$fr" >&2
done

cat <<EOF
| $RATE new payments/s, server CPU per payment (median of $ROUNDS alternating rounds of ${SECONDS_EACH} s) | value |
| --- | --- |
| no page open | $(median <"$tmp/none") ms |
| $VIEWERS open pages | $(median <"$tmp/watched") ms |
| ratio, round by round | **$(median <"$tmp/ratios")×** (rounds: $(paste -sd' ' "$tmp/ratios")) |
| a payment's 201 to its row shown done at the pages: p50 / p99 (median of rounds) | $(median <"$tmp/p50") / $(median <"$tmp/p99") ms |
| server RSS with the pages open (rounds) / its peak over the run | $(paste -sd' ' "$tmp/rss") / $(awk '$1 == "VmHWM:" { printf "%.0f", $2 / 1024 }' "/proc/$server/status") MB |
$(if [ -n "$FULL" ]; then echo "| 16 clients flat out, payments/s with the pages over none | **$(median <"$tmp/full")×** (rounds: $(paste -sd' ' "$tmp/full")) |"; fi)
EOF
