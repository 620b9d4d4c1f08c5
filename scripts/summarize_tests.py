#!/usr/bin/env python3
"""Counts passed and failed test cases of `bazel test` runs.

Usage: summarize_tests.py BAZEL_OUTPUT_LOG TESTLOGS_DIR [LOG TESTLOGS ...]

Reads each test target's status from each run's Bazel summary and its cases
from the target's test.xml under that run's testlogs; a target that failed
to build or left no XML counts as one failed case (so does a source check,
a "//checks:NAME PASSED|FAILED" line). Prints "N passed, M failed" over
all runs last and exits 1 if M > 0 or no test ran. Before it, a line per
failed case with the first lines of its failure, so that a log cut short
(CI keeps its end) still says what failed.
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
    """(tests, [(failed case, its failure's first lines)]) from a gtest or
    Bazel test.xml, or None if unreadable."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    tests, failed = 0, []
    for suite in suites:
        for case in suite.iter("testcase"):
            if case.get("status") == "notrun" or case.find("skipped") is not None:
                continue
            tests += 1
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                text = problem.get("message") or problem.text or ""
                lines = [line.strip() for line in text.splitlines() if line.strip()]
                failed.append((case.get("classname", "") + "." + case.get("name", ""), lines[:4]))
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
                counted = (1, [] if ok else [("", [])])
            tests, failures = counted
            bad = len(failures)
            if not ok and bad == 0:
                # Failed outside its cases (crash, timeout): one more failure.
                tests, bad = tests + 1, 1
                failures = [("", [])]
            if not ok:
                for case, lines in failures:
                    print(f"failed: {target} {case or status}".rstrip())
                    for text in lines:
                        print("    " + text)
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
