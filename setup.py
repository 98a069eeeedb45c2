"""Only the C extension: everything else about the package is in setup.cfg (setuptools takes
extension modules from setup.py, or from a pyproject.toml [project] table, which this project
keeps out of its minimal pyproject.toml)."""

from setuptools import Extension, setup

# The message analysis in C (memo_mw/_speedups.c). Optional: without a compiler the install still
# succeeds, and the package runs the Python code the extension mirrors (slower; memo_mw.text).
setup(ext_modules=[Extension("memo_mw._speedups", ["memo_mw/_speedups.c"], optional=True)])
