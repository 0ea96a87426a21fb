"""Build hook: the package carries a copy of the committed results (``data/results``).

Everything else about the package is in ``pyproject.toml``. When a wheel is built (by
``pip install git+...`` on Colab, or ``pip install .``), every JSON and CSV file under
``data/results/`` is copied to ``stablernn_lib/_results/``, where
``stablernn_lib.core.results.results_root`` finds it outside a checkout.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

RESULTS = Path(__file__).resolve().parent / "data" / "results"


class BuildWithResults(build_py):
    """``build_py`` that also copies ``data/results/**/*.{json,csv}`` into the package."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "stablernn_lib" / "_results"
        for path in sorted(RESULTS.rglob("*")):
            if path.suffix in (".json", ".csv") and path.is_file():
                copy = target / path.relative_to(RESULTS)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, copy)


setup(cmdclass={"build_py": BuildWithResults})
