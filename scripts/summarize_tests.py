#!/usr/bin/env python3
"""Counts passed and failed test cases of `bazel test` runs.

Usage: summarize_tests.py BAZEL_OUTPUT_LOG TESTLOGS_DIR [LOG TESTLOGS ...]

Reads each test target's status from each run's Bazel summary and its cases
from the target's test.xml under that run's testlogs; a target that failed
to build or left no XML counts as one failed case (so does a source check,
a "//checks:NAME PASSED|FAILED" line). Prints "N passed, M failed" over
all runs last and exits 1 if M > 0 or no test ran.
"""

import os
import re
import sys
import xml.etree.ElementTree as ET

STATUS = re.compile(
    r"^(//\S+)\s+(?:\(cached\)\s+)?"
    r"(PASSED|FLAKY|FAILED TO BUILD|FAILED|TIMEOUT|NO STATUS|INCOMPLETE|SKIPPED)"
)


def cases(xml_path):
    """(tests, failed) from a gtest or Bazel test.xml, or None if unreadable."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    tests = failed = 0
    for suite in suites:
        for case in suite.iter("testcase"):
            if case.get("status") == "notrun" or case.find("skipped") is not None:
                continue
            tests += 1
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
    return tests, failed


def count(log_path, testlogs):
    """(passed, failed) cases of one run."""
    passed = failed = 0
    with open(log_path, errors="replace") as log:
        for line in log:
            match = STATUS.match(line.strip())
            if not match:
                continue
            target, status = match.groups()
            if status == "SKIPPED":
                continue
            package, name = target[2:].split(":")
            counted = cases(os.path.join(testlogs, package, name, "test.xml"))
            ok = status in ("PASSED", "FLAKY")
            if counted is None:
                # No cases to read (build failure, no XML): the target is one.
                counted = (1, 0 if ok else 1)
            tests, bad = counted
            if not ok and bad == 0:
                # Failed outside its cases (crash, timeout): one more failure.
                tests, bad = tests + 1, 1
            passed += tests - bad
            failed += bad
    return passed, failed


def main():
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit(__doc__)
    passed = failed = 0
    for log_path, testlogs in zip(args[::2], args[1::2], strict=True):
        p, f = count(log_path, testlogs)
        passed += p
        failed += f
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
