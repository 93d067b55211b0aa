#!/usr/bin/env python3
"""Summarize a TCK run's reports/compatibility.json: requirement ID, level,
status (PASS / FAIL / SKIP...), and the first error of each failure.

    python3 benches/a2a-tck/summarize.py /tmp/a2a-tck/reports/compatibility.json
"""
import json
import sys

report = json.load(open(sys.argv[1]))
print(json.dumps(report["summary"]))
counts = {}
for rid, r in sorted(report["per_requirement"].items()):
    counts[r["status"]] = counts.get(r["status"], 0) + 1
    first = (r.get("errors") or [""])[0].replace("\n", " ")[:160]
    print(f"{rid:26} {r['level']:6} {r['status']:8} {first}")
print(counts)
