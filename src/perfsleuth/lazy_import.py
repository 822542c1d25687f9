"""pandas, loaded on its first use instead of at import.

Only the detectors and the cross-rank tables use pandas, and it costs a process about 56 MiB and
0.15 s to load. ``perfsleuth analyze`` forks its trace readers before any of that code runs. If
pandas were loaded at import, its pages would count in every reader's share of memory. Modules
that use pandas import it from here (``from perfsleuth.lazy_import import pandas as pd``), and it
is loaded when one of them first reaches into it.

This is the standard library's ``importlib.util.LazyLoader``. On Python 3.11 a lazy module must not
be first touched from two threads at once; perfsleuth touches pandas from the main thread only.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING


def lazy_module(name: str) -> ModuleType:
    """``name`` as a module that runs its code on first attribute access (already loaded: itself)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def is_loaded(name: str) -> bool:
    """Whether ``name`` has run its code in this process (a lazy module that nobody touched has not)."""
    module = sys.modules.get(name)
    lazy_type = getattr(importlib.util, "_LazyModule", ())  # what LazyLoader makes a module until it loads
    return module is not None and not isinstance(module, lazy_type)


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def arrow_without_pandas() -> None:
    """Make pyarrow treat this process as one without pandas, unless pandas is loaded already.

    pyarrow looks for pandas the first time it converts Python or numpy values (``pa.array``,
    ``Array.to_numpy``) and loads it if it finds it. A trace reader worker never passes pandas
    objects to Arrow or asks for them back, so its one look is made to fail, as it fails where pandas
    is not installed, and the worker stays without pandas. An explicit ``to_pandas`` would still load
    it, because pyarrow retries the import there."""
    if is_loaded("pandas"):
        return
    lazy = sys.modules.pop("pandas", None)
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        import pyarrow as pa

        pa.array([0])  # pyarrow's look for pandas happens here, and fails
    finally:
        sys.meta_path.remove(finder)
        if lazy is not None:
            sys.modules["pandas"] = lazy


if TYPE_CHECKING:
    import pandas as pandas
else:
    pandas = lazy_module("pandas")
