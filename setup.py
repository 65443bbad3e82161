"""Optional C extension: the snapshot column decoder (``oompost.parsers._snapcols``).

Everything else is in pyproject.toml.  ``optional=True``: where no C compiler or
Python headers are available the build skips it and oompost falls back to the
pure-Python restricted unpickler (same results, slower, more memory)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("oompost.parsers._snapcols", ["src/oompost/parsers/_snapcols.c"], optional=True)])
