"""Builds perfsleuth's one native module, the Kineto JSON column reader.

The JSON parser is yyjson (MIT), compiled from the ``yyjson.c``/``yyjson.h`` that the PyPI wheel
``yyjson`` ships (a build requirement in pyproject.toml): nothing of yyjson is copied into this
repository. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import Extension, setup


def _yyjson_dir() -> Path:
    spec = importlib.util.find_spec("yyjson")  # finds the package without importing its own binary
    if spec is None or spec.origin is None or not (Path(spec.origin).parent / "yyjson.c").exists():
        raise SystemExit("building perfsleuth needs the 'yyjson' wheel (it ships yyjson.c): pip installs it from "
                         "pyproject.toml's build requirements; with --no-build-isolation, pip install yyjson==4.0.6 first")
    return Path(spec.origin).parent


_YY = _yyjson_dir()
setup(ext_modules=[Extension(
    "perfsleuth.ingest._kineto_native",
    sources=["src/perfsleuth/ingest/_kineto_native.c", str(_YY / "yyjson.c")],
    include_dirs=[str(_YY)],
    extra_compile_args=["-O2", "-std=gnu11"],
    define_macros=[("YYJSON_DISABLE_WRITER", "1"), ("YYJSON_DISABLE_UTILS", "1")],
)])
