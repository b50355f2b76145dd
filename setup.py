# Minimal setup.py: only here because cffi's out-of-line build hooks in via
# setuptools' cffi_modules keyword. Everything else lives in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["native/build_ffi.py:ffibuilder"])
