#!/usr/bin/env python3
"""Tests of verify_install.py, the check run.sh makes after installing the real MCP clients.

No network: each case writes a committed lock (or requirements.txt) and what an install left
behind, runs the script as run.sh does, and reads its exit status and message.
    python3 tests/clients/test_verify_install.py
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verify_install.py")

SHA_A = "sha512-" + "A" * 86 + "=="
SHA_B = "sha512-" + "B" * 86 + "=="
SHA_C = "sha512-" + "C" * 86 + "=="


def lock(packages, root=True):
    body = {"": {"name": "smoke", "dependencies": {"vite": "8.0.0"}}} if root else {}
    body.update({f"node_modules/{name}": entry for name, entry in packages.items()})
    return {"name": "smoke", "lockfileVersion": 3, "requires": True, "packages": body}


# What an install on Linux leaves: vite and its one required dependency.
INSTALLED = {
    "vite": {"version": "8.0.0", "integrity": SHA_A, "optionalDependencies": {"win-only": "^0.1.0"}},
    "picomatch": {"version": "4.0.3", "integrity": SHA_B},
}


class Case(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, name, content):
        path = os.path.join(self.dir.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def run_script(self, *args):
        return subprocess.run(
            [sys.executable, SCRIPT, *args], capture_output=True, text=True, check=False
        )

    def npm(self, committed, installed):
        return self.run_script(
            "npm", self.write("package-lock.json", committed), self.write(".package-lock.json", installed)
        )

    def python(self, pins, installed):
        return self.run_script(
            "python", self.write("requirements.txt", pins), "--installed", self.write("freeze.txt", installed)
        )


class Npm(Case):
    def test_an_optional_package_for_another_platform_in_the_lock_passes(self):
        committed = dict(INSTALLED)
        committed["win-only"] = {
            "version": "0.1.0", "integrity": SHA_C, "optional": True, "os": ["win32"], "cpu": ["x64"]
        }
        r = self.npm(lock(committed), lock(INSTALLED, root=False))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("2 packages as pinned", r.stdout)

    def test_the_same_tree_passes(self):
        r = self.npm(lock(INSTALLED), lock(INSTALLED, root=False))
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_changed_version_of_an_installed_package_fails_naming_it(self):
        committed = dict(INSTALLED, picomatch={"version": "4.0.2", "integrity": SHA_B})
        r = self.npm(lock(committed), lock(INSTALLED, root=False))
        self.assertEqual(r.returncode, 1)
        self.assertIn("picomatch: installed 4.0.3, pinned 4.0.2", r.stderr)
        self.assertNotIn("vite", r.stderr)

    def test_a_changed_integrity_fails_naming_the_package(self):
        committed = dict(INSTALLED, picomatch={"version": "4.0.3", "integrity": SHA_C})
        r = self.npm(lock(committed), lock(INSTALLED, root=False))
        self.assertEqual(r.returncode, 1)
        self.assertIn("picomatch@4.0.3: integrity differs", r.stderr)

    def test_a_package_installed_but_not_pinned_fails_naming_it(self):
        installed = dict(INSTALLED, extra={"version": "1.0.0", "integrity": SHA_C})
        r = self.npm(lock(INSTALLED), lock(installed, root=False))
        self.assertEqual(r.returncode, 1)
        self.assertIn("extra@1.0.0 is installed but not in", r.stderr)

    def test_a_required_package_missing_from_the_install_fails_naming_it(self):
        installed = {"vite": INSTALLED["vite"]}
        r = self.npm(lock(INSTALLED), lock(installed, root=False))
        self.assertEqual(r.returncode, 1)
        self.assertIn("picomatch@4.0.3 is pinned but not installed", r.stderr)

    def test_a_missing_installed_lock_fails(self):
        r = self.run_script("npm", self.write("package-lock.json", lock(INSTALLED)), "/nonexistent/.package-lock.json")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot read /nonexistent/.package-lock.json", r.stderr)


PINS = "# comment\nmcp==2.3.0\npydantic_core==2.50.5  # trailing\n"


class Python(Case):
    def test_installed_as_pinned_passes_with_venv_tools_and_spelling_differences(self):
        r = self.python(PINS, "mcp==2.3.0\npydantic-core==2.50.5\npip==24.0\nsetuptools==65.5.0\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("2 packages as pinned", r.stdout)

    def test_a_changed_version_fails_naming_the_package(self):
        r = self.python(PINS, "mcp==2.3.1\npydantic-core==2.50.5\n")
        self.assertEqual(r.returncode, 1)
        self.assertIn("mcp: installed 2.3.1, pinned 2.3.0", r.stderr)
        self.assertNotIn("pydantic", r.stderr)

    def test_an_unpinned_package_fails_naming_it(self):
        r = self.python(PINS, "mcp==2.3.0\npydantic-core==2.50.5\nrich==14.0.0\n")
        self.assertEqual(r.returncode, 1)
        self.assertIn("rich==14.0.0 is installed but not pinned", r.stderr)

    def test_a_pinned_package_not_installed_fails_naming_it(self):
        r = self.python(PINS, "mcp==2.3.0\n")
        self.assertEqual(r.returncode, 1)
        self.assertIn("pydantic_core==2.50.5 is pinned", r.stderr)

    def test_a_pin_that_is_not_exact_is_refused(self):
        r = self.python("mcp>=2\n", "mcp==2.3.0\n")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("expected `name==version`", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
