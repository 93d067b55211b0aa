#!/usr/bin/env bash
# The A2A TCK (a2aproject/a2a-tck, branch 1.0-dev), unmodified, against
# lmos-sidecar's /a2a face with the TCK's scripted agent
# (testkit/src/tck_agent.rs, run by examples/a2a_tck_agent.rs). By hand:
# the TCK is not in a registry, so CI runs our own tests of its
# requirements instead (tests/interop/a2a_tck.rs; the table is in
# docs/agent-protocols.md, "A2A TCK requirements").
#
# This script fetches nothing. Once, beforehand:
#
#   git clone -b 1.0-dev https://github.com/a2aproject/a2a-tck /tmp/a2a-tck
#   python3 -m venv /tmp/a2a-tck-venv                  # Python >= 3.11
#   /tmp/a2a-tck-venv/bin/pip install -e /tmp/a2a-tck  # its deps, from PyPI
#
# Then, from the repository:
#
#   benches/a2a-tck/run-by-hand.sh /tmp/a2a-tck            # JSON-RPC, MUST level
#   LEVEL=should benches/a2a-tck/run-by-hand.sh /tmp/a2a-tck
#   LEVEL=all benches/a2a-tck/run-by-hand.sh /tmp/a2a-tck -- -k stream   # extra pytest args
#
# Environment: VENV (default /tmp/a2a-tck-venv), PORT (the sidecar's HTTP
# port, default 18089), LEVEL (must | should | may | all; default must),
# TCK_STREAMING_TIMEOUT (seconds, as the TCK reads it; the agent reads it
# too), CARGO_TARGET_DIR (where the debug build goes: one of this
# checkout's own; one shared with another checkout of the repository can
# keep that checkout's binaries, the package hashes being the same). The
# sidecar is the debug build of this checkout, memory only, MQTT on free
# ports. The TCK's reports land in <tck>/reports/ (compatibility.json,
# compatibility.html, junitreport.xml); the sidecar's and the agent's logs,
# and the results by requirement, in a temporary directory the script
# names. Exit status: the TCK's.
set -euo pipefail

if [[ $# -lt 1 || ! -f "$1/run_tck.py" ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
    echo "usage: $0 <a2a-tck checkout> [-- pytest args]" >&2
    exit 2
fi
tck=$(cd "$1" && pwd)
shift
[[ "${1:-}" == "--" ]] && shift
venv=${VENV:-/tmp/a2a-tck-venv}
port=${PORT:-18089}
level=${LEVEL:-must}
repo=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
python=$venv/bin/python
if [[ ! -x "$python" ]]; then
    echo "no virtualenv at $venv: create it as the head of $0 says" >&2
    exit 2
fi

(cd "$repo" && cargo build --bin lmos-sidecar --example a2a_tck_agent)

work=$(mktemp -d /tmp/a2a-tck-run.XXXXXX)
cat > "$work/sidecar.toml" <<TOML
[store]
memory_only = true
TOML
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap cleanup EXIT

base=http://127.0.0.1:$port
"$target/debug/lmos-sidecar" --config "$work/sidecar.toml" \
    --http-addr "127.0.0.1:$port" --mqtt-addr 127.0.0.1:0 --mqtt5-addr 127.0.0.1:0 \
    > "$work/sidecar.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    curl -fsS "$base/readyz" > /dev/null 2>&1 && break
    sleep 0.1
done
"$target/debug/examples/a2a_tck_agent" --sidecar "ws://127.0.0.1:$port/lmos" > "$work/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    curl -fsS "$base/.well-known/agent-card.json" > /dev/null 2>&1 && break
    sleep 0.1
done
curl -fsS "$base/.well-known/agent-card.json" > "$work/agent-card.json"
echo "sidecar $base, the agent's card in $work/agent-card.json, logs in $work"

level_args=()
[[ "$level" != "all" ]] && level_args=(--level "$level")
status=0
(cd "$tck" && "$python" run_tck.py --sut-host "$base" --transport jsonrpc "${level_args[@]}" -v -- "$@") \
    || status=$?
if [[ -f "$tck/reports/compatibility.json" ]]; then
    "$python" "$repo/benches/a2a-tck/summarize.py" "$tck/reports/compatibility.json" > "$work/requirements.txt"
    echo "by requirement: $work/requirements.txt"
fi
echo "TCK reports: $tck/reports/ (exit status $status)"
exit "$status"
