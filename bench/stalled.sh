#!/usr/bin/env bash
# Measures how long a server takes to exit after SIGTERM while STREAMS
# (500) live pages have stopped reading: each opens GET /events with a
# 4 KB receive buffer and never reads, while payments at 40 a second give
# the streams more than their sockets hold, so every stream's writes are
# blocked when the signal comes.
#
#	bench/stalled.sh
#	STREAMS=500 bench/stalled.sh
#
# It builds the binary into a temporary folder, serves on 127.0.0.1:18097
# (PORT) and removes everything when it ends. Needs python3.
set -euo pipefail

STREAMS=${STREAMS:-500}
PORT=${PORT:-18097}
URL=http://127.0.0.1:$PORT

tmp=$(mktemp -d)
server= readers=
cleanup() {
	if [ -n "$readers" ]; then kill "$readers" 2>/dev/null || true; wait "$readers" 2>/dev/null || true; fi
	if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/paytwice" .
"$tmp/paytwice" -addr "127.0.0.1:$PORT" -db "$tmp/paytwice.db" -max-streams "$((STREAMS + 100))" -limits "streams-per-address=$STREAMS,stream-opens=$((STREAMS + 100))/50ms" >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
	if curl -s -o /dev/null "$URL/"; then break; fi
	sleep 0.1
done

python3 - "$PORT" "$STREAMS" <<'PY' &
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
streams = []
for _ in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /events HTTP/1.1\r\nHost: paytwice\r\nAccept: text/event-stream\r\n\r\n")
    streams.append(s)
time.sleep(600)
PY
readers=$!
sleep 3
"$tmp/paytwice" bench -url "$URL" -c 8 -rate 40 -d 8s >/dev/null
blocked=$(ss -tn state established "( sport = :$PORT )" | awk 'NR > 1 && $3 > 0' | wc -l)
t0=$(date +%s%N)
kill -TERM "$server"
wait "$server" || true
t1=$(date +%s%N)
server=
echo "$STREAMS streams that do not read ($blocked with unsent bytes queued): the server exited $(( (t1 - t0) / 1000000 )) ms after SIGTERM"
