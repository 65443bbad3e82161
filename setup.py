"""Optional C extensions: the snapshot column decoder (``oompost.parsers._snapcols``)
and the allocator replay (``oompost.analysis._allocsim``).

Everything else is in pyproject.toml.  ``optional=True``: where no C compiler or
Python headers are available the build skips them and oompost falls back to the
pure-Python restricted unpickler and allocator model (same results, slower,
more memory)."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("oompost.parsers._snapcols", ["src/oompost/parsers/_snapcols.c"], optional=True),
    Extension("oompost.analysis._allocsim", ["src/oompost/analysis/_allocsim.c"], optional=True),
])
