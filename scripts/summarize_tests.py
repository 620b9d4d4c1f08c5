#!/usr/bin/env python3
"""Counts passed and failed test cases of a `bazel test` run.

Usage: summarize_tests.py BAZEL_OUTPUT_LOG TESTLOGS_DIR

Reads each test target's status from Bazel's summary and its cases from the
target's test.xml; a target that failed to build or left no XML counts as
one failed case. Prints "N passed, M failed" last and exits 1 if M > 0 or no
test ran.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

STATUS = re.compile(
    r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FLAKY|FAILED TO BUILD|FAILED|TIMEOUT|NO STATUS|INCOMPLETE|SKIPPED)")


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


def main():
    log_path, testlogs = sys.argv[1], sys.argv[2]
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
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
