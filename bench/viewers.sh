#!/usr/bin/env bash
# Measures what live pages cost the server: new payments at a classroom's
# pace (RATE a second, 40 by default) with no page open and with VIEWERS
# (200) open event streams, in alternating rounds on one server, and prints
# the server's CPU per payment for each, their ratio round by round, and how
# long a payment's 201 took to reach the pages (p50/p99 over the rounds
# with viewers): the phones (every payment), the payer's own phones, and
# the board. The first viewer is the board (?view=board), the others
# phones, each with one caller's token in turn (as a phone's session
# cookie names its payments). The viewers run in the load generator's
# process, as phones would on their own; only the server's CPU is counted.
#
# Run it from the repository root:
#
#	bench/viewers.sh                       # 3 rounds of 10 s each
#	ROUNDS=5 SECONDS_EACH=15 VIEWERS=200 RATE=40 bench/viewers.sh
#	VIEWERS=500 FULL=1 bench/viewers.sh    # the lecture hall
#	AGAINST=HEAD~3 bench/viewers.sh        # this build and HEAD~3's, round by round
#	FLOOD=1 bench/viewers.sh               # every payment from one caller
#	PROFILE=/tmp/prof VIEWERS=500 bench/viewers.sh  # and CPU profiles
#
# The payments come from CALLERS distinct callers (40, a class: each its
# own bearer token, each key always from one of them), as a class pays.
# FLOOD=1 sends them all as the one anonymous caller instead, as the
# script did before: a caller that far over its share of the board is
# counted in a row of its own, not drawn payment by payment, so the two
# measure different paths of the board.
#
# Each run also counts the server's write system calls per payment
# (/proc/PID/io: to its sockets and its database files alike), with no
# page and with the pages: unlike the CPU, the count does not move with
# the machine's load. It counts write calls only: on Linux the pages'
# writes are sends through an io_uring (web/board/sendring_linux.go),
# a few hundred to a call, which it does not see, so with pages open it
# is about what it is without (before, most of it was the pages').
#
# Each round also notes the server's resident memory (VmRSS) with the
# viewers open, and the run ends with its peak (VmHWM). FULL=1 adds, to
# each round, 16 clients paying as fast as they can with no page open and
# with VIEWERS open, and their ratio of payments/s: three runs a round,
# none-pages-none or pages-none-pages, the ratio against the outer two's
# mean (a growing database slows each run after the one before).
#
# AGAINST=<rev> (a commit, tag or branch) builds that revision too, in a
# temporary git worktree, and serves it beside this build on PORT+1, each
# over a database of its own; every round measures both, one after the
# other, in alternating order (this build first in odd rounds), with the
# same load generator (this build's `paytwice bench`). The table then
# gives each build's figures and the ratio of this build's CPU ratio over
# the revision's, round by round: the rounds of one run share the
# machine's load, where two runs minutes apart do not. The revision must
# take the same server flags (-addr, -db, -limits with streams,
# streams-per-address and stream-opens).
#
# PROFILE=<dir> builds this build with the pprof tag (main_pprof.go) and
# saves, for every round, a CPU profile of the server while no page is open
# and one while the viewers are, SECONDS_EACH-2 seconds each, as
# <dir>/<build>-<round>-none.pprof and -viewers.pprof (with FULL, of the
# flat-out runs too: -full-none.pprof and -full-viewers.pprof; go tool pprof -top
# on one; -diff_base the other). A profile's proportions hold on a loaded
# machine where its ratios do not.
#
# It builds the binaries into a temporary folder, serves on 127.0.0.1:18090
# (PORT to change it) over fresh database files, and removes everything
# when it ends. Linux only: server CPU comes from /proc.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECONDS_EACH=${SECONDS_EACH:-10}
VIEWERS=${VIEWERS:-200}
RATE=${RATE:-40}
PORT=${PORT:-18090}
CALLERS=${CALLERS:-40}
FLOOD=${FLOOD:-}
FULL=${FULL:-}
AGAINST=${AGAINST:-}
PROFILE=${PROFILE:-}

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	if [ -d "$tmp/src" ]; then git worktree remove --force "$tmp/src" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

tags=()
if [ -n "$PROFILE" ]; then mkdir -p "$PROFILE"; tags=(-tags pprof); fi
go build "${tags[@]}" -o "$tmp/paytwice" .
builds=(this)
if [ -n "$AGAINST" ]; then
	rev=$(git rev-parse --verify --quiet "$AGAINST^{commit}") || { echo "AGAINST=$AGAINST: no such revision" >&2; exit 2; }
	git worktree add --detach --quiet "$tmp/src" "$rev"
	(cd "$tmp/src" && go build -o "$tmp/against" .)
	git worktree remove --force "$tmp/src"
	builds+=(against)
fi

# start serves build $1 on port $2. Every viewer comes from this one
# address, where a lecture hall's phones come from hundreds: the room's
# share per address is raised to let them in.
declare -A url pid pprof
start() {
	local bin=$tmp/paytwice
	if [ "$1" = against ]; then bin=$tmp/against; fi
	PAYTWICE_PPROF=127.0.0.1:$(($2 + 10)) "$bin" -addr "127.0.0.1:$2" -db "$tmp/$1.db" \
		-limits "streams=$((VIEWERS + 100)),streams-per-address=$((VIEWERS + 50)),stream-opens=$((VIEWERS + 50))/1ms" >"$tmp/$1.log" 2>&1 &
	pid[$1]=$!
	pids+=("$!")
	url[$1]=http://127.0.0.1:$2
	pprof[$1]=http://127.0.0.1:$(($2 + 10))
	for _ in $(seq 100); do
		if curl -s -o /dev/null "${url[$1]}/"; then return; fi
		sleep 0.1
	done
	echo "the $1 build did not start:" >&2
	cat "$tmp/$1.log" >&2
	exit 1
}
start this "$PORT"
if [ -n "$AGAINST" ]; then start against $((PORT + 1)); fi

who=(-callers "$CALLERS")
if [ -n "$FLOOD" ]; then who=(); fi
# Each takes the build as its first argument.
# full prints the payments/s; it keeps the server's CPU per payment in
# $tmp/$1.fullcpu-none or -pages, a figure the machine's other work moves
# less than the throughput.
full() {
	local kind=none
	if [ $# -gt 1 ]; then kind=pages; fi
	"$tmp/paytwice" bench -url "${url[$1]}" -pid "${pid[$1]}" -c 16 -d "${SECONDS_EACH}s" "${who[@]}" "${@:2}" >"$tmp/full-out"
	awk '$1 == "server" && $2 == "CPU" { print $5 }' "$tmp/full-out" >>"$tmp/$1.fullcpu-$kind"
	awk '$1 == "throughput" { print $2 }' "$tmp/full-out"
}
rss() { awk '$1 == "VmRSS:" { printf "%.0f\n", $2 / 1024 }' "/proc/${pid[$1]}/status"; }
bench() { "$tmp/paytwice" bench -url "${url[$1]}" -pid "${pid[$1]}" -c 8 -rate "$RATE" -d "${SECONDS_EACH}s" "${who[@]}" "${@:2}"; }
cpu() { awk '$1 == "server" && $2 == "CPU" { print $5 }'; }
writes() { awk '$1 == "server" && $2 == "writes" { print $6 }'; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
list() { paste -sd' ' "$1"; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3)" >&2
if [ -n "$AGAINST" ]; then echo "against: $AGAINST ($rev)" >&2; fi
for b in "${builds[@]}"; do
	bench "$b" -viewers 1 -d 3s >/dev/null # warm-up: page cache, the live model, connections
	for f in none watched ratios p50 p99 own board full fullcpu-none fullcpu-pages rss writes-none writes-pages; do : >"$tmp/$b.$f"; done
done

# profile saves a CPU profile of build $1 as $PROFILE/$1-$2.pprof, when
# PROFILE is set and the build has the pprof tag (this build only).
profile() {
	if [ -z "$PROFILE" ] || [ "$1" != this ]; then return; fi
	sleep 1
	curl -s -o "$PROFILE/$1-$2.pprof" "${pprof[$1]}/debug/pprof/profile?seconds=$((SECONDS_EACH - 2))"
}

# round measures build $1 in round $2.
round() {
	local b=$1 r=$2 a w fr= fs f0 f1 f2 ca cb
	a=$(bench "$b" & profile "$b" "$r-none"; wait)
	w=$(bench "$b" -viewers "$VIEWERS" & profile "$b" "$r-viewers" & sleep $((SECONDS_EACH - 1)); rss "$b" >"$tmp/rss-now"; wait)
	cat "$tmp/rss-now" >>"$tmp/$b.rss"
	if [ -n "$FULL" ]; then
		# Three flat-out runs a round, the middle one of the other kind
		# (none, pages, none in odd rounds; pages, none, pages in even
		# ones), and the ratio taken against the mean of the outer two:
		# the server pays more slowly as its database grows, so the
		# second of two runs was the slower whatever it was, and with an
		# odd number of rounds one kind came second more often.
		if [ $((r % 2)) = 1 ]; then
			f0=$(full "$b" & profile "$b" "$r-full-none"; wait)
			f1=$(full "$b" -viewers "$VIEWERS" & profile "$b" "$r-full-viewers"; wait)
			f2=$(full "$b")
			fr=$(awk -v a="$f0" -v b="$f1" -v c="$f2" 'BEGIN { printf "%.2f", b / ((a + c) / 2) }')
			fs="$f0 and $f2/s with no page, $f1/s with $VIEWERS"
		else
			f1=$(full "$b" -viewers "$VIEWERS" & profile "$b" "$r-full-viewers"; wait)
			f0=$(full "$b" & profile "$b" "$r-full-none"; wait)
			f2=$(full "$b" -viewers "$VIEWERS")
			fr=$(awk -v a="$f0" -v b="$f1" -v c="$f2" 'BEGIN { printf "%.2f", ((b + c) / 2) / a }')
			fs="$f0/s with no page, $f1 and $f2/s with $VIEWERS"
		fi
		echo "$fr" >>"$tmp/$b.full"
		fr="; 16 clients flat out: $fs ($fr)"
	fi
	ca=$(echo "$a" | cpu)
	cb=$(echo "$w" | cpu)
	echo "$ca" >>"$tmp/$b.none"
	echo "$cb" >>"$tmp/$b.watched"
	echo "$a" | writes >>"$tmp/$b.writes-none"
	echo "$w" | writes >>"$tmp/$b.writes-pages"
	awk -v a="$ca" -v b="$cb" 'BEGIN { printf "%.2f\n", b / a }' >>"$tmp/$b.ratios"
	echo "$w" | awk '$1 == "201→viewer" { print $3 }' >>"$tmp/$b.p50"
	echo "$w" | awk '$1 == "201→viewer" { print $6 }' >>"$tmp/$b.p99"
	echo "$w" | awk '$1 == "201→own" { print $6 }' >>"$tmp/$b.own"
	echo "$w" | awk '$1 == "201→board" { print $6 }' >>"$tmp/$b.board"
	# The one-minute load at the round's end: other work on the machine
	# moves these figures more than most changes do, so each round says
	# how loaded it was.
	echo "round $r, $b build (load $(cut -d' ' -f1 /proc/loadavg)): no viewers $ca ms/payment, $VIEWERS viewers $cb ms/payment, server RSS $(cat "$tmp/rss-now") MB; $(echo "$w" | grep -E '^(201→viewer|201→own|201→board|viewers) ' | tr '\n' ' ')$fr" >&2
}

for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then order=("${builds[@]}"); else order=(); for ((i = ${#builds[@]} - 1; i >= 0; i--)); do order+=("${builds[i]}"); done; fi
	for b in "${order[@]}"; do round "$b" "$r"; done
done

from="$CALLERS callers"
if [ -n "$FLOOD" ]; then from="one anonymous caller"; fi
# rows prints build $1's rows of the table, its label $2.
rows() {
	local b=$1 l=$2
	cat <<EOF
| ${l}no page open | $(median <"$tmp/$b.none") ms |
| ${l}$VIEWERS open pages | $(median <"$tmp/$b.watched") ms |
| ${l}ratio, round by round | **$(median <"$tmp/$b.ratios")×** (rounds: $(list "$tmp/$b.ratios")) |
| ${l}a payment's 201 to its row shown done at the phones: p50 / p99 (median of rounds) | $(median <"$tmp/$b.p50") / $(median <"$tmp/$b.p99") ms |
| ${l}p99 at the payer's own phones / at the board (median of rounds) | $(median <"$tmp/$b.own") / $(median <"$tmp/$b.board") ms |
| ${l}server write calls per payment, no page / with the pages (median of rounds) | $(median <"$tmp/$b.writes-none") / $(median <"$tmp/$b.writes-pages") |
| ${l}server RSS with the pages open (rounds) / its peak over the run | $(list "$tmp/$b.rss") / $(awk '$1 == "VmHWM:" { printf "%.0f", $2 / 1024 }' "/proc/${pid[$b]}/status") MB |
EOF
	if [ -n "$FULL" ]; then
		echo "| ${l}16 clients flat out, payments/s with the pages over none | **$(median <"$tmp/$b.full")×** (rounds: $(list "$tmp/$b.full")) |"
		echo "| ${l}16 clients flat out, server CPU per payment with no page / with the pages (median of runs) | $(median <"$tmp/$b.fullcpu-none") / $(median <"$tmp/$b.fullcpu-pages") ms |"
	fi
}

echo "machine: load average at the end $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "| $RATE new payments/s from $from, server CPU per payment (median of $ROUNDS alternating rounds of ${SECONDS_EACH} s) | value |"
echo "| --- | --- |"
if [ -z "$AGAINST" ]; then
	rows this ""
	exit 0
fi
rows this "this build: "
rows against "$AGAINST: "
paste -d' ' "$tmp/this.ratios" "$tmp/against.ratios" | awk '{ printf "%.2f\n", $1 / $2 }' >"$tmp/over"
echo "| this build's CPU ratio over ${AGAINST}'s, round by round | **$(median <"$tmp/over")×** (rounds: $(list "$tmp/over")) |"
