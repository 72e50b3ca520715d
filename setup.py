"""Builds the `pollux` extension with CMake (target pollux_python) for pip/setuptools.

    pip install --no-build-isolation .

The CMake build lives in build/setuptools/cmake (extra configure arguments from the
environment variable POLLUX_CMAKE_ARGS, e.g. "-DPOLLUX_WITH_RDMA=OFF"); the module and its
stubs (pollux.pyi) are copied where setuptools packs the wheel. docs/PYTHON.md says why
setuptools drives CMake here rather than scikit-build-core.
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
BUILD = ROOT / "build" / "setuptools"


class CMakeBuild(build_ext):
    """Configures the project for the interpreter running pip and builds only pollux_python."""

    def build_extension(self, ext):
        cmake_dir = BUILD / "cmake"
        args = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DPOLLUX_PYTHON=ON",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DPOLLUX_BUILD_TESTS=OFF",
            "-DPOLLUX_BUILD_BENCH=OFF",
            "-DPOLLUX_BUILD_EXAMPLES=OFF",
        ] + shlex.split(os.environ.get("POLLUX_CMAKE_ARGS", ""))
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(cmake_dir), *args], check=True)
        jobs = str(os.cpu_count() or 2)
        subprocess.run(["cmake", "--build", str(cmake_dir), "--target", "pollux_python", "-j", jobs], check=True)
        built = sorted((cmake_dir / "python").glob("pollux*.so"))
        if not built:
            raise RuntimeError(f"no pollux*.so in {cmake_dir / 'python'} after the build")
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[-1], dest)
        shutil.copy2(ROOT / "api" / "python" / "pollux.pyi", dest.parent / "pollux.pyi")


setup(
    ext_modules=[Extension("pollux", sources=[])],
    packages=[],  # one extension module; no discovery over the C++ tree
    py_modules=[],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(BUILD)}, "egg_info": {"egg_base": str(BUILD)}},
    zip_safe=False,
)
