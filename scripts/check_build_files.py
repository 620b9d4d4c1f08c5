#!/usr/bin/env python3
"""Checks the Bazel files' layout as buildifier would, with --fix to mend it.

buildifier itself is not in Debian 12's packages nor on PyPI, the registries
these machines reach, so this covers what it would change here: the string
lists of deps, srcs, hdrs, data, tools and visibility sorted (labels of the
package first, then the workspace's, then external ones; a comment line or
a blank line starts a new run), no tabs, no trailing whitespace, and one
newline at the end.

    scripts/check_build_files.py [--fix] [FILE...]   # default: every BUILD.bazel and .bzl
"""

import re
import subprocess
import sys

SORTED = {"deps", "srcs", "hdrs", "data", "tools", "visibility", "default_visibility"}
LIST_START = re.compile(r"^\s*(?:package\()?(\w+) = \[$")
ELEMENT = re.compile(r'^\s*"([^"]*)",(\s*#.*)?$')


def label_key(line):
    value = ELEMENT.match(line).group(1)
    group = 0 if value.startswith(":") else 2 if value.startswith("@") else 1
    return (group, value)


def sorted_lines(lines):
    """The file's lines with each run of list elements sorted."""
    out, run, sorting = [], [], False
    for line in lines:
        if sorting and ELEMENT.match(line):
            run.append(line)
            continue
        out += sorted(run, key=label_key)
        run = []
        start = LIST_START.match(line)
        if start:
            sorting = start.group(1) in SORTED
        elif line.strip().startswith("]"):
            sorting = False
        out.append(line)
    return out + sorted(run, key=label_key)


def problems(path, text):
    found = []
    lines = text.split("\n")
    if not text.endswith("\n") or text.endswith("\n\n"):
        found.append(f"{path}: must end with one newline")
    for number, line in enumerate(lines, 1):
        if "\t" in line:
            found.append(f"{path}:{number}: a tab")
        if line != line.rstrip():
            found.append(f"{path}:{number}: trailing whitespace")
    if sorted_lines(lines) != lines:
        found.append(f"{path}: a list of labels or files is not sorted (--fix sorts it)")
    return found


def main():
    args = sys.argv[1:]
    fix = "--fix" in args
    paths = [a for a in args if a != "--fix"] or subprocess.run(
        ["git", "ls-files", "BUILD.bazel", "*/BUILD.bazel", "*.bzl", "WORKSPACE"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for path in paths:
        with open(path) as f:
            text = f.read()
        if fix:
            text = "\n".join(sorted_lines(text.rstrip("\n").split("\n"))) + "\n"
            with open(path, "w") as f:
                f.write(text)
        found += problems(path, text)
    for problem in found:
        print(problem)
    if found:
        print(f"check_build_files: {len(found)} problem(s) in {len(paths)} files")
        return 1
    print(f"check_build_files: {len(paths)} files laid out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
