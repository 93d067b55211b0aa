#!/usr/bin/env python3
"""
The official MCP conformance suite (npm @modelcontextprotocol/conformance,
pinned in package-lock.json: 0.1.16 for the 2025-11-25 server scenarios,
0.2.0-alpha.12 for the 2026-07-28 revision's requirements) against the
sidecar's binary on /mcp, with the fixture agent (fixture_agent.mjs, an
ordinary LMOS agent on the WebSocket gateway) providing the tools and
resources the scenarios call. CI runs it after `cargo build --release`
(.ci/run).

usage: run.py BINARY [--node NODE] [--only 2025-11-25|2026-07-28] [--scenario NAME]
env:   MCP_CONFORMANCE_NODE  Node.js >= 22 (the suite wants it; default:
                             `node` on PATH)

Each suite version runs every server scenario on a fresh sidecar (ephemeral
loopback ports, read from its "Sidecar ready." line; a store directory of
its own) with a fresh fixture agent. baseline-<revision>.yml lists the
scenarios that cannot apply to a bridge, each with its reason; the suite's
own --expected-failures check makes the run fail when a listed scenario
passes or an unlisted one fails.
"""
import argparse, json, os, re, signal, subprocess, sys, tempfile, threading, time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
READY = re.compile(r"Sidecar ready\..*?\bhttp=(\S+)")
THING = "urn:lmos:mcp-conformance-fixture"
SUITES = {
    # revision: (package alias, what to run)
    "2025-11-25": ("conformance-2025-11-25", ["--suite", "all"]),
    "2026-07-28": ("conformance-2026-07-28", ["--requirements", "2026-07-28"]),
}


def drain(stream, sink=None):
    """Reads `stream` on, so that a full pipe never stops its writer."""
    def loop():
        for line in stream:
            if sink is not None:
                sink.append(line)
    threading.Thread(target=loop, daemon=True).start()


def start_sidecar(binary):
    args = [binary, "--mqtt-addr", "127.0.0.1:0", "--mqtt5-addr", "127.0.0.1:0",
            "--http-addr", "127.0.0.1:0"]
    env = dict(os.environ, LMOS_SIDECAR_STORE__DIR=tempfile.mkdtemp(prefix="lmos-mcp-conf-"),
               NO_COLOR="1")
    sidecar = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env)
    timer = threading.Timer(30, sidecar.kill)
    timer.start()
    seen = []
    for line in sidecar.stdout:
        seen.append(line)
        match = READY.search(re.sub(r"\x1b\[[0-9;]*m", "", line))
        if match:
            timer.cancel()
            drain(sidecar.stdout)
            return sidecar, match.group(1)
    timer.cancel()
    sidecar.kill()
    sys.exit("the sidecar did not get ready:\n" + "".join(seen[-20:]))


def start_agent(node, http):
    agent = subprocess.Popen([node, os.path.join(HERE, "fixture_agent.mjs"), "ws://%s/lmos" % http],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = agent.stdout.readline()
    if "ready" not in line:
        agent.kill()
        sys.exit("the fixture agent did not start: " + line + agent.stdout.read())
    drain(agent.stdout)
    # Registered once the directory has its description.
    url = "http://%s/things/%s" % (http, THING)
    for _ in range(100):
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return agent
        except OSError:
            pass
        time.sleep(0.1)
    agent.kill()
    sys.exit("the fixture agent's description never showed in the directory")


def stop(process):
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()


def outcomes(folder):
    """{scenario: "PASS" | "FAIL"} from the suite's checks.json files."""
    found = {}
    for root, _, files in os.walk(folder):
        if "checks.json" not in files:
            continue
        with open(os.path.join(root, "checks.json")) as f:
            checks = json.load(f)
        name = os.path.basename(root)
        name = re.sub(r"^server-", "", re.sub(r"-\d{4}-\d\d-\d\dT.*$", "", name))
        failed = any(c.get("status") == "FAILURE" for c in checks)
        found[name] = "FAIL" if failed else "PASS"
    return found


def run(binary, node, revision, scenario):
    package, selection = SUITES[revision]
    suite = os.path.join(HERE, "node_modules", package, "dist", "index.js")
    baseline = os.path.join(HERE, "baseline-%s.yml" % revision)
    sidecar, http = start_sidecar(binary)
    agent = start_agent(node, http)
    out = tempfile.mkdtemp(prefix="mcp-conformance-%s-" % revision)
    args = [node, suite, "server", "--url", "http://%s/mcp" % http, "-o", out]
    args += ["--scenario", scenario] if scenario else selection + ["--expected-failures", baseline]
    print("== MCP %s: %s" % (revision, " ".join(args[1:])), flush=True)
    try:
        result = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=900, cwd=HERE)
    finally:
        stop(agent)
        stop(sidecar)
    found = outcomes(out)
    for name in sorted(found):
        print("  %s %s" % (found[name], name))
    passed = sum(1 for v in found.values() if v == "PASS")
    print("MCP %s: %d/%d scenarios passed" % (revision, passed, len(found)), flush=True)
    tail = result.stdout.strip().splitlines()[-25:]
    print("\n".join("  | " + line for line in tail), flush=True)
    return result.returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("--node", default=os.environ.get("MCP_CONFORMANCE_NODE", "node"))
    parser.add_argument("--only", choices=sorted(SUITES))
    parser.add_argument("--scenario")
    options = parser.parse_args()
    failed = []
    for revision in sorted(SUITES):
        if options.only and revision != options.only:
            continue
        if run(options.binary, options.node, revision, options.scenario) != 0:
            failed.append(revision)
    for revision in failed:
        print("FAILED MCP %s: a scenario outside baseline-%s.yml failed, or one in it passed"
              % (revision, revision))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
