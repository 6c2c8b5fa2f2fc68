"""setup.py — the weft Python package (python/weft) over libweft.

    pip install --no-build-isolation ./python

bundles libweft.so.1 into the package, found (in order) at $WEFT_LIBRARY, in the install prefix that
pkg-config's weft.pc names, or in ../build*/ of this checkout; with none found it installs without
one and the module finds the library at run time (WEFT_LIBRARY, the loader's path). Only setuptools
is needed (Debian: python3-setuptools); no compiler, nothing downloaded.
"""
import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "libweft.so.1"


def find_library():
    env = os.environ.get("WEFT_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise SystemExit(f"WEFT_LIBRARY={env}: no such file")
        return env
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "weft"], capture_output=True, text=True,
                                check=True).stdout.strip()
        if os.path.isfile(os.path.join(libdir, LIBRARY)):
            return os.path.join(libdir, LIBRARY)
    except (OSError, subprocess.CalledProcessError):
        pass
    built = sorted(glob.glob(os.path.join(HERE, "..", "build*", LIBRARY)), key=os.path.getmtime)
    return built[-1] if built else None


class build_py_with_library(build_py):
    """build_py, then a copy of libweft.so.1 into the package (the symlinks resolved)."""

    def run(self):
        super().run()
        library = find_library()
        if library:
            target = os.path.join(self.build_lib, "weft", LIBRARY)
            shutil.copyfile(os.path.realpath(library), target)
            print(f"weft: bundled {os.path.realpath(library)}")
        else:
            print("weft: no libweft.so.1 found to bundle; the module will look for it at run time "
                  "(WEFT_LIBRARY or the loader's path)")


class BinaryDistribution(Distribution):
    """The package carries a compiled library: its wheel is tagged for this platform, not 'any'."""

    def has_ext_modules(self):
        return True


setup(
    name="weft",
    version="0.1.0",
    description="Run LLMs from GGUF files: llama-cpp-python's Llama over weft's C API",
    packages=["weft"],
    python_requires=">=3.9",
    cmdclass={"build_py": build_py_with_library},
    distclass=BinaryDistribution,
    zip_safe=False,
)
