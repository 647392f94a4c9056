# sf-serve's tests' set-up (sf-serve.bats, sf-serve-openai.bats,
# sf-serve-ollama.bats): a server on a loopback port the kernel picks,
# waited for, and ended by SIGTERM; a POST and a metric's value.

# Starts sf-serve with the arguments (after --model MODEL --port 0, or
# with SERVE_IMAGE set that image instead of --model) and waits until
# /health says ready; URL is its address, SP its pid.
start_server() {
	LOG=$BATS_TEST_TMPDIR/serve.log
	: >"$LOG"	# before the server's own redirection: read at once below
	if [ -n "${SERVE_IMAGE:-}" ]; then
		sf-serve --port 0 "$@" "$SERVE_IMAGE" 2>"$LOG" 3>&- &
	else
		sf-serve --model "$MODEL" --port 0 "$@" 2>"$LOG" 3>&- &
	fi
	SP=$!
	local port=
	for _ in $(seq 300); do
		port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$LOG")
		if [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ]; then
			URL=http://127.0.0.1:$port
			return 0
		fi
		kill -0 "$SP" 2>/dev/null || { cat "$LOG"; return 1; }
		sleep 0.05
	done
	cat "$LOG"
	return 1
}

# The client first, then the server by SIGTERM: it drains and must exit
# 0 (under SANITIZE=1, with no leak reported).
teardown() {
	if [ -n "${CP:-}" ]; then
		kill -9 "$CP" 2>/dev/null || true
		wait "$CP" 2>/dev/null || true
	fi
	if [ -n "${SP:-}" ]; then
		local rc=0
		kill -TERM "$SP" 2>/dev/null || true
		wait "$SP" || rc=$?
		SP=
		[ "$rc" -eq 0 ] || { echo "sf-serve exited $rc"; cat "$LOG"; return 1; }
	fi
}

# POST body to path: the body in $output, the status in $code.
post() {
	local path=$1 body=$2
	shift 2
	output=$(curl -s -w '\n%{http_code}' "$@" -H 'Content-Type: application/json' \
		--data-binary "$body" "$URL$path")
	code=${output##*$'\n'}
	output=${output%$'\n'*}
}

# The value of a metric line of /metrics.
metric() {
	curl -s "$URL/metrics" | sed -n "s/^$1 //p"
}

# A client streaming BODY from PATH in the background (CP its pid, its
# output in $BATS_TEST_TMPDIR/stream), waited for until its first bytes.
stream_in_background() {
	curl -sN -H 'Content-Type: application/json' --data-binary "$2" "$URL$1" \
		>"$BATS_TEST_TMPDIR/stream" 3>&- &
	CP=$!
	for _ in $(seq 200); do [ -s "$BATS_TEST_TMPDIR/stream" ] && break; sleep 0.05; done
	[ -s "$BATS_TEST_TMPDIR/stream" ]
}

# The client CP goes away; waits until the server has freed its slot.
drop_client() {
	kill "$CP"
	wait "$CP" || true
	CP=
	for _ in $(seq 100); do [ "$(metric sf_slots_busy)" = 0 ] && break; sleep 0.05; done
	[ "$(metric sf_slots_busy)" = 0 ]
}
