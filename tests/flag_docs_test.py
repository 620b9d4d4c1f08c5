#!/usr/bin/env python3
"""docs/flags.md's tables against the binaries' --helpfull: every flag a
binary defines (absl's own aside) is in its table, every flag of the table
exists, and a single flag's default is the binary's (a default cell of prose,
such as "the bazel-bin it was built into", is not compared)."""

import os
import re
import subprocess
import sys

BINARIES = {
    "ps_server": "ps_server/ps_server",
    "worker": "worker/worker",
    "local_cluster": "deploy/local_cluster",
    "fulcrumctl": "deploy/fulcrumctl",
}
ENTRY = re.compile(r"--(\w+) \((.*?)\);\s+default: (.*?);(?=\n    --|\n\n|\n$)", re.S)


def runfile(path):
    root = os.environ.get("TEST_SRCDIR", ".")
    workspace = os.environ.get("TEST_WORKSPACE", "")
    candidate = os.path.join(root, workspace, path)
    return candidate if os.path.exists(candidate) else path


def binary_flags(binary):
    """{name: default} of the flags `binary` defines, absl's own aside."""
    text = subprocess.run(
        [runfile(binary), "--helpfull"], capture_output=True, text=True, check=False
    ).stdout
    flags = {}
    for section in re.split(r"\n  Flags from ", text)[1:]:
        source, body = section.split(":\n", 1)
        if "absl/" in source:
            continue
        for name, _, default in ENTRY.findall(body + "\n"):
            flags[name] = default.strip().strip('"')
    return flags


def documented_flags(markdown, section):
    """{name: default cell or None for a row of several flags} of the table
    under '## section'."""
    match = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(section), markdown, re.S | re.M)
    if not match:
        return None
    flags = {}
    for row in re.findall(r"^\| (`--.*?) \| (.*?) \|", match.group(1), re.M):
        names = re.findall(r"`--(\w+)`", row[0])
        for name in names:
            flags[name] = row[1].strip() if len(names) == 1 else None
    return flags


def same_default(cell, default):
    value = cell.replace("`", "").strip()
    if " " in value:  # prose
        return True
    return value == default


def main():
    with open(runfile("docs/flags.md")) as f:
        markdown = f.read()
    problems = []
    for section, binary in BINARIES.items():
        actual = binary_flags(binary)
        if not actual:
            problems.append(f"{binary} --helpfull listed no flags")
            continue
        documented = documented_flags(markdown, section)
        if documented is None:
            problems.append(f"docs/flags.md has no '## {section}' section")
            continue
        for name in sorted(set(actual) - set(documented)):
            problems.append(f"{section}: --{name} (default {actual[name]!r}) is not documented")
        for name in sorted(set(documented) - set(actual)):
            problems.append(f"{section}: --{name} is documented but {binary} has no such flag")
        for name in sorted(set(actual) & set(documented)):
            cell = documented[name]
            if cell is not None and not same_default(cell, actual[name]):
                problems.append(
                    f"{section}: --{name}: documented default {cell!r}, "
                    f"the binary's is {actual[name]!r}"
                )
        print(f"{section}: {len(actual)} flags checked")
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
