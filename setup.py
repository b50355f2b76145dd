# Minimal setup.py: only here because cffi's out-of-line build hooks in via
# setuptools' cffi_modules keyword. Everything else lives in pyproject.toml.
# ParallelBuildExt compiles the one extension's ~35 C files on every core (distutils compiles the
# files of one extension one after another; pip install -e runs this build).
import os
import types
from concurrent.futures import ThreadPoolExecutor

from setuptools import setup
from setuptools.command.build_ext import build_ext


def _parallel_compile(self, sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                      extra_preargs=None, extra_postargs=None, depends=None):
    """distutils CCompiler.compile with the per-file loop on a thread pool (numpy.distutils' recipe)."""
    macros, objects, extra_postargs, pp_opts, build = self._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs)
    cc_args = self._get_cc_args(pp_opts, debug, extra_preargs)

    def one(obj):
        src, ext = build[obj]
        self._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(one, objects))
    return objects


class ParallelBuildExt(build_ext):
    def build_extension(self, ext):
        self.compiler.compile = types.MethodType(_parallel_compile, self.compiler)
        super().build_extension(ext)


setup(cffi_modules=["native/build_ffi.py:ffibuilder"], cmdclass={"build_ext": ParallelBuildExt})
