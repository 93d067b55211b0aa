#!/usr/bin/env python3
"""
Wrapper around the unmodified Eclipse Paho interoperability suites
(interoperability/client_test.py = MQTT 3.1.1, client_test5.py = MQTT 5).

Why a wrapper: the upstream __main__ blocks hand sys.argv to unittest.main(),
which rejects --hostname/-h (and, for 3.1.1, -p/--port), and -z/-d/-s crash
client_test.py ("unhandled option").  So we import the module, set the same
module globals its __main__ block sets, and run the TestCase ourselves with
a per-test timeout and a one-line reason per failure.

usage: run_suite.py HOST PORT VERSION(3|5) [test_name ...]
env:   SKIP="test_a test_b"      tests to leave out
       PER_TEST_TIMEOUT=45       seconds before a single test is aborted
       NOSUBSCRIBE_TOPIC=...     topic filter the broker refuses (default test/nosubscribe)
       PAHO_SUITE=DIR            the suite (default: ../shared/conformance/paho-interoperability
                                 beside the repository, where it is kept unmodified)
"""
import io, os, re, signal, sys, time, traceback, unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE_DIR = os.environ.get("PAHO_SUITE") or os.path.normpath(
    os.path.join(HERE, "..", "..", "..", "shared", "conformance", "paho-interoperability"))


class TestTimeout(Exception):
    pass


class Tee(io.TextIOBase):
    """Write to the real stream (-> log) and to a per-test capture buffer."""

    def __init__(self, real, cap):
        self.real, self.cap = real, cap

    def write(self, s):
        self.real.write(s)
        self.cap.write(s)
        return len(s)

    def flush(self):
        self.real.flush()


EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Timeout|timeout|MQTTException)|"
                      r"AssertionError|socket\.timeout|TimeoutError)(:.*)?$")


def one_line_reason(err, captured):
    """Prefer the innermost exception printed by the test itself (the upstream tests
    often catch, print_exc() and then assert succeeded == True)."""
    outer = traceback.format_exception_only(err[0], err[1])[-1].strip()
    inner = [l.strip() for l in captured.splitlines() if EXC_LINE.match(l.strip())]
    # drop receiver-thread noise that is not the test's own assertion
    inner = [l for l in inner if not l.startswith("call: unexpected")]
    where = ""
    if outer.startswith("AssertionError: False != True") and inner:
        msg = inner[-1]
        lines = re.findall(r'File "[^"]*(client_test5?\.py)", line (\d+)', captured)
        if lines:
            where = " [%s:%s]" % lines[-1]
    else:
        msg = outer
        frames = [f for f in traceback.extract_tb(err[2]) if re.search(r"client_test5?\.py$", f.filename)]
        if frames:
            where = " [%s:%d]" % (os.path.basename(frames[-1].filename), frames[-1].lineno)
    return msg[:300] + where


class Result(unittest.TextTestResult):
    def __init__(self, *a, per_test_timeout=90, **k):
        super().__init__(*a, **k)
        self.per_test_timeout = per_test_timeout
        self.reasons = {}
        self.durations = {}
        self.passed = []

    def startTest(self, test):
        self._cap = io.StringIO()
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout = Tee(self._saved[0], self._cap)
        sys.stderr = Tee(self._saved[1], self._cap)
        self._t0 = time.time()
        print("\n===== %s =====" % test.id().split(".")[-1], flush=True)

        def on_alarm(signum, frame):
            raise TestTimeout("test exceeded %ss (hung waiting for a packet?)" % self.per_test_timeout)

        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(self.per_test_timeout)
        super().startTest(test)

    def stopTest(self, test):
        signal.alarm(0)
        super().stopTest(test)
        name = test.id().split(".")[-1]
        self.durations[name] = time.time() - self._t0
        sys.stdout, sys.stderr = self._saved

    def _record(self, test, err):
        cap = getattr(self, "_cap", None)
        self.reasons[test.id().split(".")[-1]] = one_line_reason(err, cap.getvalue() if cap else "")

    def addFailure(self, test, err):
        self._record(test, err)
        super().addFailure(test, err)

    def addError(self, test, err):
        self._record(test, err)
        super().addError(test, err)

    def addSuccess(self, test):
        self.passed.append(test.id().split(".")[-1])
        super().addSuccess(test)


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    host, port, version = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    only = sys.argv[4:]
    skip = set(os.environ.get("SKIP", "").split())
    per_test_timeout = int(os.environ.get("PER_TEST_TIMEOUT", "45"))

    os.chdir(SUITE_DIR)
    sys.path.insert(0, SUITE_DIR)
    if version in ("3", "311", "3.1.1", "4"):
        import client_test as mod
        mod.topics = ("TopicA", "TopicA/B", "Topic/C", "TopicA/C", "/TopicA")
        mod.wildtopics = ("TopicA/+", "+/C", "#", "/#", "/+", "+/+", "TopicA/#")
        label = "MQTT 3.1.1 (client_test.py)"
    elif version == "5":
        import client_test5 as mod
        # same as client_test5.__main__; note Test.setUpClass -> setData() then
        # overwrites topics/wildtopics with the UNprefixed "TopicA"... set.
        mod.topic_prefix = "client_test5/"
        mod.topics = [mod.topic_prefix + t for t in ["TopicA", "TopicA/B", "Topic/C", "TopicA/C", "/TopicA"]]
        mod.wildtopics = [mod.topic_prefix + t for t in ["TopicA/+", "+/C", "#", "/#", "/+", "+/+", "TopicA/#"]]
        label = "MQTT 5 (client_test5.py)"
    else:
        print("VERSION must be 3 or 5")
        return 2
    mod.nosubscribe_topics = (os.environ.get("NOSUBSCRIBE_TOPIC", "test/nosubscribe"),)
    mod.host, mod.port = host, port

    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(mod.Test)  # alphabetical, like unittest.main
    if only:
        names = [n for n in names if n in only]
    names = [n for n in names if n not in skip]
    suite = unittest.TestSuite([mod.Test(n) for n in names])

    print("%s against %s:%d; tests: %s" % (label, host, port, " ".join(names)), flush=True)
    runner = unittest.TextTestRunner(
        stream=sys.stdout, verbosity=2,
        resultclass=lambda *a, **k: Result(*a, per_test_timeout=per_test_timeout, **k))
    t0 = time.time()
    result = runner.run(suite)

    failed = {}
    for test, _ in result.failures + result.errors:
        tid = test.id().split(".")[-1] if hasattr(test, "id") else str(test)
        failed[tid] = result.reasons.get(tid, "setUpClass/infrastructure error: " + _.strip().splitlines()[-1])
    print("\n==================== SUMMARY ====================")
    print("suite   : %s" % label)
    print("broker  : %s:%d" % (host, port))
    print("ran     : %d  passed: %d  failed: %d  (skipped by SKIP: %s)  time: %.0fs" % (
        result.testsRun, len(result.passed), len(failed), " ".join(sorted(skip)) or "-", time.time() - t0))
    for n in result.passed:
        print("  PASS  %s (%.1fs)" % (n, result.durations.get(n, 0)))
    for n, why in failed.items():
        print("  FAIL  %s (%.1fs): %s" % (n, result.durations.get(n, 0), why))
    sys.stdout.flush()
    os._exit(0 if not failed else 1)  # don't wait for the suite's receiver threads


if __name__ == "__main__":
    sys.exit(main())
