"""Builds the rlx Python package (`pip install .`): CMake configures this source tree
and builds only the extension module's target (_rlx) and the libraries it links, in
Release, without tests, benchmarks or the CUDA backend unless asked.

Environment:
  RLX_JOBS           parallel compile jobs (default: the number of CPU cores)
  RLX_PY_CUDA        RLX_CUDA for the build: OFF (default), AUTO or ON
  RLX_PY_BUILD_TYPE  CMake build type (default Release)
  RLX_PY_BUILD_DIR   CMake build folder to use (default: under setuptools' build_temp),
                     e.g. to keep one between installs
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def rlx_version() -> str:
    """The version in CMakeLists.txt's project() line (the C++ library's own)."""
    match = re.search(r"project\(rlx VERSION ([0-9][0-9.]*)", (ROOT / "CMakeLists.txt").read_text())
    if not match:
        raise RuntimeError("setup.py: no 'project(rlx VERSION x.y.z' line in CMakeLists.txt")
    return match.group(1)


class CMakeExtension(Extension):
    """An extension whose sources CMake knows (python/CMakeLists.txt)."""

    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        if shutil.which("cmake") is None:
            raise RuntimeError("setup.py: cmake not found; run scripts/install-deps.sh first")
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(os.environ.get("RLX_PY_BUILD_DIR") or Path(self.build_temp).resolve() / "cmake")
        jobs = os.environ.get("RLX_JOBS") or str(os.cpu_count() or 1)
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            f"-DCMAKE_BUILD_TYPE={os.environ.get('RLX_PY_BUILD_TYPE', 'Release')}",
            f"-DRLX_CUDA={os.environ.get('RLX_PY_CUDA', 'OFF')}",
            "-DRLX_BUILD_PYTHON=ON", "-DRLX_BUILD_TESTS=OFF", "-DRLX_BUILD_BENCH=OFF", "-DRLX_BUILD_FUZZ=OFF",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DRLX_PYTHON_OUTPUT_DIR={out_dir}",
        ]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_rlx", "-j", jobs], check=True)


setup(
    version=rlx_version(),
    packages=["rlx"],
    package_dir={"": "python"},
    package_data={"rlx": ["py.typed", "__init__.pyi"]},
    ext_modules=[CMakeExtension("rlx._rlx")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
