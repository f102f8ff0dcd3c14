"""pip's build of the bexpress package (pyproject.toml): CMake builds libbexpress, the _bexpress
extension and the simnic, and the wheel carries all three inside the package, beside
python/bexpress/*.py. Offline, with Debian's pip, setuptools and wheel:

    pip install --no-build-isolation .
    pip wheel --no-build-isolation --no-deps -w dist .

Environment: BX_WHEEL_BUILD_DIR, where the build goes (default build-wheel/ here; CMake's tree is
its cmake/, and a second build there is incremental); CMAKE_ARGS, more configure arguments;
CMAKE_BUILD_PARALLEL_LEVEL, the build's jobs (default one per core).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# Everything the build writes goes here: setuptools' default, build/, is the Makefile's CMake
# tree, and two builds at once (python_pip_install beside a user's) must not share a directory.
BUILD_BASE = Path(os.environ.get("BX_WHEEL_BUILD_DIR") or ROOT / "build-wheel").resolve()
BUILD_BASE.mkdir(parents=True, exist_ok=True)  # egg_info wants its directory to exist


def project_version():
    """The version CMakeLists.txt's project() declares: one place to change it."""
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(bexpress VERSION ([0-9.]+)", text).group(1)


class CMakeBuild(build_ext):
    """Builds _bexpress with CMake and copies it, libbexpress and the simnic into the package."""

    def build_extension(self, ext):
        build = BUILD_BASE / "cmake"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            # The library, the module and the simnic: no GoogleTest or CLI11 needed.
            "-DBX_BUILD_TESTS=OFF", "-DBX_BUILD_TOOLS=OFF", "-DBX_BUILD_SIM=ON",
            "-DBX_BUILD_PYTHON=ON", "-DBX_UNITY_TESTS=ON",  # the module as 3 unity files, not 7
            # The interpreter pip runs (a venv's): the module's file name carries its ABI.
            f"-DPython_EXECUTABLE={sys.executable}",
            # Linked with their installed RPATH, the binaries are copied as they are; the module's
            # is $ORIGIN, as libbexpress is put beside it.
            "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DBX_PYTHON_RPATH=$ORIGIN",
        ]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            configure += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache",
                          "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build), "--target", "_bexpress", "bx_simnic",
                        "--parallel", jobs], check=True)

        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        (module,) = (build / "python" / "bexpress").glob("_bexpress*.so")
        shutil.copy(module, target)
        # libbexpress under its SONAME, the name the module asks for (a wheel holds no symlinks),
        # and the simnic where the verbs loader looks for it: beside libbexpress.
        soname = os.readlink(build / "lib" / "libbexpress.so")
        shutil.copy(build / "lib" / soname, target.parent / soname)
        shutil.copy(build / "lib" / "libbx_simnic.so", target.parent)


setup(
    version=project_version(),
    packages=["bexpress"],
    package_dir={"": "python"},  # here: setuptools 66 warns [tool.setuptools] is beta
    ext_modules=[Extension("bexpress._bexpress", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(BUILD_BASE)}, "egg_info": {"egg_base": str(BUILD_BASE)}},
)
