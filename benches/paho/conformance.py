#!/usr/bin/env python3
"""
The Eclipse Paho interoperability suite (unmodified, in
../shared/conformance/paho-interoperability/) against the sidecar's binary,
both MQTT versions, test by test with a timeout; fails when a test listed in
expected.txt does not pass (a test that fails is run once more, alone, on a
fresh sidecar first). CI runs it after `cargo test` (.ci/run).

usage: conformance.py BINARY [CONFIG.toml]
       (with CONFIG, e.g. config/paho-policies.toml, the expected list is
       expected-<its name>.txt, e.g. expected-paho-policies.txt)
env:   PAHO_SUITE        the suite's folder (default: ../shared/... beside the repo)
       PER_TEST_TIMEOUT  seconds before one test is abandoned (default 30)

Each version gets a fresh sidecar on ephemeral loopback ports (the ports are
read from its "Sidecar ready." line), stopped with SIGTERM afterwards. The
expected list names, per version, the tests that pass on the built-in
defaults; a test that passes but is not listed is reported, so that the list
can only grow.
"""
import os, re, signal, subprocess, sys, tempfile, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
READY = re.compile(r"Sidecar ready\. mqtt=(\S+)")
RESULT = re.compile(r"^\s+(PASS|FAIL)\s+(\w+)")


def expected(path):
    """{version: set(test names)} from the list (`5 test_name`, # comments)."""
    wanted = {"3": set(), "5": set()}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                version, name = line.split()
                wanted[version].add(name)
    return wanted


def start(binary, config):
    args = [binary, "--mqtt-addr", "127.0.0.1:0", "--mqtt5-addr", "127.0.0.1:0",
            "--http-addr", "127.0.0.1:0"]
    if config:
        args += ["--config", config]
    # The store on, as by default, in a directory of this run's own.
    env = dict(os.environ, LMOS_SIDECAR_STORE__DIR=tempfile.mkdtemp(prefix="lmos-paho-"))
    sidecar = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)
    timer = threading.Timer(30, sidecar.kill)
    timer.start()
    seen = []
    for line in sidecar.stdout:
        seen.append(line)
        match = READY.search(line)
        if match:
            timer.cancel()
            # Its log is read on, so that a full pipe never stops it.
            threading.Thread(target=lambda: [None for _ in sidecar.stdout], daemon=True).start()
            return sidecar, match.group(1)
    timer.cancel()
    sidecar.kill()
    sys.exit("the sidecar did not get ready:\n" + "".join(seen[-20:]))


def run(binary, config, version, only=()):
    sidecar, address = start(binary, config)
    host, port = address.rsplit(":", 1)
    try:
        suite = subprocess.run(
            [sys.executable, os.path.join(HERE, "run_suite.py"), host, port, version, *only],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    finally:
        sidecar.send_signal(signal.SIGTERM)
        try:
            sidecar.wait(timeout=15)
        except subprocess.TimeoutExpired:
            sidecar.kill()
    results = {}
    summary = suite.stdout.split("==================== SUMMARY ====================")[-1]
    for line in summary.splitlines():
        match = RESULT.match(line)
        if match:
            results[match.group(2)] = match.group(1)
    print(summary.strip(), flush=True)
    return results


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    config = sys.argv[2] if len(sys.argv) > 2 else None
    name = "expected.txt"
    if config:
        name = "expected-%s.txt" % os.path.splitext(os.path.basename(config))[0]
    listed = os.path.join(HERE, name)
    wanted = expected(listed)
    print("Paho against %s on %s; expected: %s" % (binary, config or "its defaults", listed),
          flush=True)
    failures = []
    for version in ("3", "5"):
        results = run(binary, config, version)
        passed = {name for name, outcome in results.items() if outcome == "PASS"}
        print("MQTT %s: %d/%d passed" % ("3.1.1" if version == "3" else "5",
                                         len(passed), len(results)), flush=True)
        missing = sorted(wanted[version] - passed)
        if missing:
            # Once more, alone, on a fresh sidecar: a test that passes then
            # is reported as unsteady, not as a regression.
            print("MQTT %s: again, alone: %s" % (version, " ".join(missing)), flush=True)
            again = run(binary, config, version, missing)
            for name in missing:
                if again.get(name) == "PASS":
                    print("UNSTEADY MQTT %s: %s failed in the whole run, passed alone" % (version, name))
                else:
                    failures.append("MQTT %s: %s passed before and does not now" % (version, name))
        for name in sorted(passed - wanted[version]):
            print("MQTT %s: %s passes now; add it to %s" % (version, name, listed))
    for f in failures:
        print("REGRESSION " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
