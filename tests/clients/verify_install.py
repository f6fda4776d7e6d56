#!/usr/bin/env python3
"""Checks that the real MCP clients installed by run.sh are exactly what the repository pins.

    verify_install.py npm LOCK INSTALLED_LOCK
        LOCK is the committed package-lock.json; INSTALLED_LOCK is node_modules/.package-lock.json,
        which npm writes with what it really put in node_modules on this machine.
    verify_install.py python REQUIREMENTS [--installed FILE]
        REQUIREMENTS holds `name==version` pins; the installed set is read from the running
        interpreter (run it with the venv's python), or from FILE in `pip freeze` form (tests).

Why not compare npm's rewritten lock with the committed one: npm re-resolves optional
dependencies for every platform when it rewrites the lock, so a new optional package for another
OS (napi-windows-process-start-time, for one) changes the lock without changing anything that is
installed here. What matters is what landed on this machine, so that is what is checked.
Exit 0 when everything matches; 1 with one line per mismatch, each naming the package.
"""

import json
import re
import sys

PREFIX = "node_modules/"


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        sys.exit(f"verify_install: cannot read {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"verify_install: {path} is not JSON ({e})")


def packages_of(lock, path):
    packages = lock.get("packages") if isinstance(lock, dict) else None
    if not isinstance(packages, dict):
        sys.exit(f'verify_install: {path} has no "packages" (lockfileVersion 2 or 3 expected)')
    return {k: v for k, v in packages.items() if k.startswith(PREFIX) and isinstance(v, dict)}


def check_npm(lock_path, installed_path):
    pinned = packages_of(load_json(lock_path), lock_path)
    installed = packages_of(load_json(installed_path), installed_path)
    problems = []
    for key in sorted(installed):
        name = key[len(PREFIX):]
        got = installed[key]
        want = pinned.get(key)
        if want is None:
            problems.append(f"{name}@{got.get('version')} is installed but not in {lock_path}")
            continue
        if got.get("version") != want.get("version"):
            problems.append(
                f"{name}: installed {got.get('version')}, pinned {want.get('version')} in {lock_path}"
            )
        elif got.get("integrity") and want.get("integrity") and got["integrity"] != want["integrity"]:
            problems.append(f"{name}@{got.get('version')}: integrity differs from {lock_path}")
    # An optional package may be absent (it is for another platform); a required one may not.
    for key in sorted(set(pinned) - set(installed)):
        if not (pinned[key].get("optional") or pinned[key].get("devOptional") or pinned[key].get("dev")):
            problems.append(f"{key[len(PREFIX):]}@{pinned[key].get('version')} is pinned but not installed")
    return problems, len(installed)


def canonical(name):
    # PEP 503: names compare case-insensitively with runs of -_. equal.
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(path, what):
    pins = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        sys.exit(f"verify_install: cannot read {path}: {e.strerror}")
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        if not m:
            sys.exit(f"verify_install: {path}:{number}: expected `name==version` {what}, got {line!r}")
        pins[canonical(m.group(1))] = (m.group(1), m.group(2))
    return pins


def installed_here():
    import importlib.metadata as metadata

    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[canonical(name)] = (name, dist.version)
    return found


# Installed with every venv, not by requirements.txt.
VENV_TOOLS = {"pip", "setuptools", "wheel"}


def check_python(requirements, installed_file):
    pins = parse_pins(requirements, "pins")
    installed = parse_pins(installed_file, "lines") if installed_file else installed_here()
    problems = []
    for key, (name, version) in sorted(pins.items()):
        got = installed.get(key)
        if got is None:
            problems.append(f"{name}=={version} is pinned in {requirements} but not installed")
        elif got[1] != version:
            problems.append(f"{name}: installed {got[1]}, pinned {version} in {requirements}")
    for key, (name, version) in sorted(installed.items()):
        if key not in pins and key not in VENV_TOOLS:
            problems.append(f"{name}=={version} is installed but not pinned in {requirements}")
    return problems, len(pins)


def main(argv):
    if len(argv) == 4 and argv[1] == "npm":
        problems, count = check_npm(argv[2], argv[3])
        kind = "npm"
    elif len(argv) in (3, 5) and argv[1] == "python":
        installed_file = None
        if len(argv) == 5:
            if argv[3] != "--installed":
                return usage()
            installed_file = argv[4]
        problems, count = check_python(argv[2], installed_file)
        kind = "python"
    else:
        return usage()
    for p in problems:
        print(f"verify_install: {kind}: {p}", file=sys.stderr)
    if problems:
        print(
            f"verify_install: {kind}: {len(problems)} package(s) differ from the pins;"
            " fix the pins (or the registry mirror) and reinstall",
            file=sys.stderr,
        )
        return 1
    print(f"verify_install: {kind}: {count} packages as pinned")
    return 0


def usage():
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
