#!/usr/bin/env python3
"""Packs the assembled fulcrum package (bazel-bin/python/site/fulcrum) into a
wheel for the Python running this script: fulcrum-VERSION-TAG.whl.

    python3 python/build_wheel.py --site bazel-bin/python/site --out dist

The wheel holds the Python modules and the native extension, which links
Debian 12's gRPC, protobuf and Abseil libraries: install it on a machine with
those (scripts/install_deps.sh --build puts them there). Use
scripts/build_wheel.sh, which builds first.
"""

import argparse
import base64
import hashlib
import os
import re
import sys
import sysconfig
import zipfile

SUMMARY = "Fulcrum's Python client: NumPy and PyTorch models on Fulcrum's parameter servers"


def tag():
    """cp311-cp311-linux_x86_64 for Debian 12's python3 on x86-64."""
    version = "cp%d%d" % sys.version_info[:2]
    platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return "%s-%s-%s" % (version, version, platform)


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, help="Directory holding fulcrum/.")
    parser.add_argument("--out", required=True, help="Directory for the wheel.")
    args = parser.parse_args()
    package = os.path.join(args.site, "fulcrum")
    with open(os.path.join(package, "__init__.py")) as f:
        version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
    files = sorted(
        os.path.relpath(os.path.join(d, n), package)
        for d, _, names in os.walk(package)
        for n in names
        if n.endswith(".py") or n == "_fulcrum.so"
    )
    if "_fulcrum.so" not in files:
        sys.exit("build_wheel: %s has no _fulcrum.so; bazel build //python:site first" % package)
    dist_info = "fulcrum-%s.dist-info" % version
    python = "%d.%d" % sys.version_info[:2]
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: fulcrum",
            "Version: " + version,
            "Summary: " + SUMMARY,
            "License: Apache-2.0",
            "Requires-Python: ==%s.*" % python,
            "Requires-Dist: numpy",
            "Provides-Extra: torch",
            'Requires-Dist: torch; extra == "torch"',
            'Requires-Dist: threadpoolctl; extra == "torch"',
            "Provides-Extra: tensorflow",
            'Requires-Dist: tensorflow-cpu>=2.17; extra == "tensorflow"',
            "",
            "The native extension links Debian 12's libgrpc++, libprotobuf and libabsl.",
            "",
        ]
    )
    wheel = "\n".join(
        [
            "Wheel-Version: 1.0",
            "Generator: fulcrum build_wheel.py",
            "Root-Is-Purelib: false",
            "Tag: " + tag(),
            "",
        ]
    )
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "fulcrum-%s-%s.whl" % (version, tag()))
    records = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        for name in files:
            with open(os.path.join(package, name), "rb") as f:
                data = f.read()
            info = zipfile.ZipInfo("fulcrum/" + name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
            records.append(record_line("fulcrum/" + name, data))
        for name, text in (("METADATA", metadata), ("WHEEL", wheel)):
            whl.writestr(dist_info + "/" + name, text)
            records.append(record_line(dist_info + "/" + name, text.encode()))
        records.append(dist_info + "/RECORD,,")
        whl.writestr(dist_info + "/RECORD", "\n".join(records) + "\n")
    print(path)


if __name__ == "__main__":
    main()
