"""The repository as a pip package, offline (no package index), with Debian's pip, setuptools and
wheel: `pip install --no-build-isolation .` into one fresh venv, `pip wheel` of the same build,
and that wheel installed into a second venv after the build tree is deleted. In each venv, with
no PYTHONPATH, bexpress imports from the venv, initialises on the simnic the wheel carries, and
the CTR example trains briefly against a `bx ps serve` cluster ($BX_BIN).

Everything goes in a temporary directory under the working directory (ctest's build tree); the
compiler cache makes a rebuild there mostly links."""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import zipfile

SOURCE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
EXAMPLE = os.path.join(SOURCE, "examples", "python", "ctr_train.py")

# Run with a venv's python: the package is the venv's, loaded with the simnic beside it.
CHECK = r"""
import os, sys
import bexpress
package = os.path.dirname(bexpress.__file__)
assert package.startswith(sys.prefix + os.sep), f"{package} is not in the venv {sys.prefix}"
bexpress.init()
assert bexpress.devices()[0]["backend"] == "sim", bexpress.devices()
loaded = {line.split()[-1] for line in open("/proc/self/maps") if ".so" in line}
simnic = os.path.join(package, "libbx_simnic.so")
assert simnic in loaded, sorted(path for path in loaded if "bx" in path)
print(package)
"""


def ccache_base_dir(temp):
    """ccache's base_dir: paths below it are hashed relative to the build directory, so the next
    run's build in another temporary directory hits the cache. The repository's and the temporary
    directory's common ancestor when there is one below / (make test: the clone, as the Makefile
    sets it, so a fresh clone hits too), else the temporary directory's parent."""
    common = os.path.commonpath([SOURCE, temp])
    return common if common != "/" else os.path.dirname(temp)


class PipInstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.started = time.monotonic()
        cls.dir = tempfile.mkdtemp(prefix="pip-install-", dir=os.getcwd())
        cls.addClassCleanup(shutil.rmtree, cls.dir)
        # No build tree on the path, no pip configuration or index of this machine's.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
        env.update(
            PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
            PIP_CACHE_DIR=cls.path("pip-cache"), BX_WHEEL_BUILD_DIR=cls.path("build"),
            CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2"),
            CCACHE_BASEDIR=ccache_base_dir(cls.dir),
            PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", BX_VERBS="sim")
        env.pop("GLIBC_TUNABLES", None)  # none needed: the import must work without
        env.pop("LD_PRELOAD", None)
        cls.env = env
        cls.installed = cls.venv("installed")
        cls.run_timed("pip install", cls.installed, "-m", "pip", "install",
                      "--no-build-isolation", SOURCE)
        # The same build again (incremental), as a wheel.
        cls.run_timed("pip wheel", cls.installed, "-m", "pip", "wheel", "--no-build-isolation",
                      "--no-deps", "-w", cls.path("dist"), SOURCE)
        cls.wheels = glob.glob(cls.path("dist", "*.whl"))
        # Another machine has no build tree: neither venv may need this one.
        shutil.rmtree(cls.path("build"))
        cls.from_wheel = cls.venv("from-wheel")
        cls.run_timed("wheel install", cls.from_wheel, "-m", "pip", "install", *cls.wheels)

    @classmethod
    def tearDownClass(cls):
        print(f"python_pip_install: {time.monotonic() - cls.started:.0f} s", file=sys.stderr)

    @classmethod
    def path(cls, *parts):
        return os.path.join(cls.dir, *parts)

    @classmethod
    def venv(cls, name):
        """A fresh venv of Debian's interpreter that sees the system's numpy and torch."""
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages",
                        cls.path(name)], check=True)
        return cls.path(name, "bin", "python")

    @classmethod
    def run_timed(cls, what, python, *args):
        started = time.monotonic()
        subprocess.run([python, *args], check=True, env=cls.env, cwd=cls.dir)
        print(f"{what}: {time.monotonic() - started:.0f} s", file=sys.stderr)

    def check(self, python):
        """Imports and initialises in the venv; returns the package's directory."""
        reply = subprocess.run([python, "-c", CHECK], env=self.env, cwd=self.dir, check=True,
                               stdout=subprocess.PIPE, text=True, timeout=60)
        package = reply.stdout.strip()
        # The module finds libbexpress beside itself, by its RUNPATH.
        (module,) = glob.glob(os.path.join(package, "_bexpress*.so"))
        dynamic = subprocess.run(["readelf", "-d", module], check=True, stdout=subprocess.PIPE,
                                 text=True).stdout
        self.assertIn("Library runpath: [$ORIGIN]", dynamic)
        ldd = subprocess.run(["ldd", module], check=True, stdout=subprocess.PIPE, text=True,
                             env=self.env).stdout
        self.assertIn(f"libbexpress.so.0.1 => {package}/libbexpress.so.0.1", ldd)
        self.assertNotIn("not found", ldd)
        return package

    def test_pip_install_of_the_repository(self):
        self.check(self.installed)

    def test_pip_wheel_holds_the_package_library_and_simnic(self):
        self.assertEqual(len(self.wheels), 1, self.wheels)
        name = os.path.basename(self.wheels[0])
        tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
        self.assertRegex(name, rf"^bexpress-[0-9.]+-{tag}-{tag}-linux_x86_64\.whl$")
        with zipfile.ZipFile(self.wheels[0]) as wheel:
            files = {n for n in wheel.namelist() if n.startswith("bexpress/")}
        module = [n for n in files if n.startswith("bexpress/_bexpress")]
        self.assertEqual(len(module), 1, files)
        self.assertEqual(files - set(module), {
            "bexpress/__init__.py", "bexpress/errors.py", "bexpress/testing.py",
            "bexpress/torch.py", "bexpress/libbexpress.so.0.1", "bexpress/libbx_simnic.so"})

    def test_the_wheel_in_a_fresh_venv_trains_the_ctr_example(self):
        self.check(self.from_wheel)
        reply = subprocess.run(
            [self.from_wheel, EXAMPLE, "--json", "--transports", "rdma", "--trainers", "1",
             "--samples", "4000", "--epochs", "1", "--rank-batches", "5"],
            env=self.env, cwd=self.dir, check=True, stdout=subprocess.PIPE, text=True,
            timeout=120)
        (run,) = json.loads(reply.stdout)
        self.assertEqual(run["transport"], "rdma")
        epoch = run["trainers"][0]["epochs"][0]
        self.assertGreater(epoch["steps"], 0)
        self.assertLess(epoch["loss"], 1.0)
        self.assertEqual(run["ranker"]["batches"], 5)


if __name__ == "__main__":
    unittest.main()
