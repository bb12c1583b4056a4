"""Build hook for `pip install ./python`.

* Records where the source checkout is (xfer/_build_info.py), so that an
  installed package finds the repository's build/libxfer.so when neither
  $XFER_LIBRARY nor a bundled copy is there.
* With XFER_BUNDLE_LIBRARY=/path/to/libxfer.so set, copies that library into
  the package (xfer/lib/) and marks the wheel as platform-specific.

Everything else is in pyproject.toml.
"""
import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
BUNDLE = os.environ.get("XFER_BUNDLE_LIBRARY")


class BuildPy(build_py):
    def run(self):
        super().run()
        out = Path(self.build_lib) / "xfer"
        out.mkdir(parents=True, exist_ok=True)
        (out / "_build_info.py").write_text(
            '"""Written by setup.py at install time."""\n'
            f"SOURCE_ROOT = {str(HERE.parent)!r}\n"
        )
        if BUNDLE:
            src = Path(BUNDLE).resolve()
            if not src.is_file():
                raise SystemExit(f"XFER_BUNDLE_LIBRARY={BUNDLE}: no such file")
            (out / "lib").mkdir(exist_ok=True)
            shutil.copy2(src, out / "lib" / "libxfer.so")


class MaybeBinary(Distribution):
    def has_ext_modules(self):
        return bool(BUNDLE)


setup(cmdclass={"build_py": BuildPy}, distclass=MaybeBinary)
