-- wrk script: every request a new payment, with a key of its own.
--   wrk -t2 -c16 -d10s -s bench/wrk-payments.lua http://127.0.0.1:18080
-- Keys are the thread's number, a random prefix drawn once per run, and a
-- counter, so that no two requests of any thread share one.
local counter = 0
local prefix

function setup(thread)
	thread:set("id", tostring(math.random(1, 2^30)) .. "-" .. tostring(os.time()))
end

function init(args)
	prefix = "wrk-" .. id .. "-"
end

function request()
	counter = counter + 1
	local key = prefix .. counter
	local body = '{"order_id":"' .. key .. '","amount_satang":1000}'
	return wrk.format("POST", "/v1/payments", {
		["Content-Type"] = "application/json",
		["Idempotency-Key"] = '"' .. key .. '"',
	}, body)
end

function done(summary, latency, requests)
	io.write(string.format("throughput %.0f requests/s\n", summary.requests / (summary.duration / 1e6)))
	io.write(string.format("answers not 2xx or 3xx %d\n", summary.errors.status))
	io.write(string.format("latency p50 %.2f ms p99 %.2f ms\n", latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
