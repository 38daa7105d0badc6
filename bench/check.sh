#!/usr/bin/env bash
# Times paytwice check's full run against paytwice (SQLite, every case
# that needs no -gateway or -replay-after: -count-url and -other-auth
# given), directly and through bench/slowproxy, which holds every request
# 100 ms (DELAY) before forwarding it, in alternating rounds, and prints
# each run's total, the history check's own time, and the summary line.
#
# Run it from the repository root:
#
#	bench/check.sh                  # 3 rounds
#	ROUNDS=5 DELAY=100ms bench/check.sh
#
# Serves on 127.0.0.1:PORT (18610) and PORT+1, over a fresh database in a
# temporary folder that it removes at the end.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DELAY=${DELAY:-100ms}
PORT=${PORT:-18610}
direct=http://127.0.0.1:$PORT
slow=http://127.0.0.1:$((PORT + 1))

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/paytwice" .
go build -o "$tmp/slowproxy" ./bench/slowproxy
"$tmp/paytwice" -addr "127.0.0.1:$PORT" -db "$tmp/check.db" >"$tmp/server.log" 2>&1 &
pids+=($!)
"$tmp/slowproxy" -addr "127.0.0.1:$((PORT + 1))" -target "$direct" -delay "$DELAY" 2>"$tmp/proxy.log" &
pids+=($!)
for _ in $(seq 100); do curl -fs "$direct/v1/idempotency-policy" >/dev/null && curl -fs "$slow/v1/idempotency-policy" >/dev/null && break; sleep 0.1; done

one() { # one full run through base URL $1; prints total, history check, summary
	"$tmp/paytwice" check -json -count-url "$1/v1/payments?order_id={{id}}" -count-field charges \
		-other-auth 'Bearer bob' -H 'Authorization: Bearer alice' "$1/v1/payments" >"$tmp/report.json" || true
	python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
h = r["history"]
print("%6.2f s  history check %.4f s (%d operations)  %s" % (r["seconds"], h["seconds"], h["operations"], r["summary"]["line"]))
' "$tmp/report.json"
}

echo "load: $(uptime)"
for round in $(seq "$ROUNDS"); do
	if [ $((round % 2)) = 1 ]; then order="direct slow"; else order="slow direct"; fi
	for which in $order; do
		if [ "$which" = direct ]; then base=$direct; else base=$slow; fi
		printf 'round %d %-6s ' "$round" "$which"
		one "$base"
	done
done
echo "load: $(uptime)"
