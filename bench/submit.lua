-- wrk script: POST the job spec in $SPEC to the target with the token in
-- $TOKEN (bench/daemon_http.sh, bench/daemon_soak.sh).
local f = assert(io.open(os.getenv("SPEC"), "r"))
local body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/yaml"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
