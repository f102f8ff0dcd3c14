"""bexpress.testing.find_bx, which LocalCluster runs: without BX_BIN it finds the bx installed
beside the package, then the build tree's, then bx on PATH, and says where it looked when there
is none (an installed package once found no bx unless BX_BIN was set). Each layout holds a
copy of testing.py (stdlib only), loaded from there."""

import importlib.util
import os
import shutil
import tempfile
import unittest
from unittest import mock

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "bexpress",
                      "testing.py")


class FindBxTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="bx-find-")
        self.addCleanup(shutil.rmtree, self.root)
        # Nothing of this machine's: no BX_BIN, a PATH without bx.
        patch = mock.patch.dict(os.environ, {"PATH": self.path("empty")})
        patch.start()
        self.addCleanup(patch.stop)
        os.environ.pop("BX_BIN", None)
        os.makedirs(self.path("empty"))

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def fake_bx(self, *parts):
        os.makedirs(self.path(*parts[:-1]), exist_ok=True)
        with open(self.path(*parts), "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(self.path(*parts), 0o755)
        return self.path(*parts)

    def find_bx(self, package, link=False):
        """find_bx of a testing.py in `package` (a copy, or a link as in the build tree)."""
        os.makedirs(self.path(package), exist_ok=True)
        target = self.path(package, "testing.py")
        if link:
            os.symlink(os.path.realpath(SOURCE), target)
        else:
            shutil.copy(SOURCE, target)
        spec = importlib.util.spec_from_file_location("bx_testing_" + package.replace("/", "_"),
                                                      target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.find_bx()

    def test_the_bx_installed_beside_the_package(self):
        bx = self.fake_bx("prefix", "bin", "bx")
        self.fake_bx("path", "bx")
        os.environ["PATH"] = self.path("path")
        self.assertEqual(self.find_bx("prefix/lib/python3.11/dist-packages/bexpress"), bx)

    def test_the_build_trees_bx(self):
        bx = self.fake_bx("build", "bin", "bx")
        self.assertEqual(self.find_bx("build/python/bexpress", link=True), bx)

    def test_bx_on_path(self):
        bx = self.fake_bx("path", "bx")
        os.environ["PATH"] = self.path("path")
        self.assertEqual(self.find_bx("prefix/lib/python3.11/dist-packages/bexpress"), bx)

    def test_bx_bin_first_and_checked(self):
        self.fake_bx("prefix", "bin", "bx")
        os.environ["BX_BIN"] = self.fake_bx("elsewhere", "bx")
        self.assertEqual(self.find_bx("prefix/lib/python3.11/dist-packages/bexpress"),
                         os.environ["BX_BIN"])
        os.environ["BX_BIN"] = self.path("missing", "bx")
        with self.assertRaisesRegex(FileNotFoundError, "BX_BIN=.*missing/bx is not an executable"):
            self.find_bx("prefix/lib/python3.11/dist-packages/bexpress")

    def test_none_found_says_where_it_looked(self):
        with self.assertRaises(FileNotFoundError) as raised:
            self.find_bx("prefix/lib/python3.11/dist-packages/bexpress")
        message = str(raised.exception)
        for place in ("$BX_BIN (not set)", self.path("prefix", "bin", "bx"),
                      self.path("prefix", "lib", "python3.11", "bin", "bx"), "bx on PATH"):
            self.assertIn(place, message)


if __name__ == "__main__":
    unittest.main()
