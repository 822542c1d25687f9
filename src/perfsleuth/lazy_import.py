"""pandas, loaded on its first use instead of at import, and kept out of processes that never use it.

Only the fleet tables, the serving, NCCL and step-log detectors and the reports of those use pandas;
reading traces and diagnosing them from traces alone do not, and loading it costs a process about
56 MiB and 0.2 s. Modules that use pandas import it from here (``from perfsleuth.lazy_import import
pandas as pd``), and it is loaded when one of them first reaches into it.

pyarrow loads pandas too, the first time it converts Python or numpy values, whenever pandas is
installed. ``arrow_without_pandas`` makes that one look fail, so that a trace job's processes stay
without pandas; when something does load pandas later (through the lazy module here, which is
what ``import pandas`` returns once this module is imported), pyarrow is told (``_LoadThenTellArrow``)
and converts pandas objects as it would have.

The lazy module is the standard library's ``importlib.util.LazyLoader``. On Python 3.11 a lazy module
must not be first touched from two threads at once; perfsleuth touches pandas from the main thread only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING


class _LoadThenTellArrow(importlib.abc.Loader):
    """pandas' own loader, followed by pyarrow's re-check for pandas (``arrow_without_pandas``)."""

    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        if _ARROW_LOOKED_WITHOUT_PANDAS:
            import pyarrow as pa

            pa.Table.from_pandas(module.DataFrame())  # an explicit conversion: pyarrow imports pandas again if it had failed to


_ARROW_LOOKED_WITHOUT_PANDAS = False
"""Whether ``arrow_without_pandas`` made pyarrow's one look for pandas fail in this process. Only then may
loading pandas tell pyarrow: where pyarrow's own first look is what loads pandas, it holds a lock that
telling it would take again (a deadlock, seen when a process imported this module and then converted
a numpy array without calling ``arrow_without_pandas`` first)."""


def lazy_module(name: str) -> ModuleType:
    """``name`` as a module that runs its code on first attribute access (already loaded: itself)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = _LoadThenTellArrow(spec.loader) if name == "pandas" else spec.loader
    spec.loader = importlib.util.LazyLoader(loader)
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
    ``Array.to_numpy``) and loads it if it finds it. Reading and diagnosing traces never pass pandas
    objects to Arrow or ask for them back, so its one look is made to fail, as it fails where pandas
    is not installed, and the process stays without pandas. An explicit ``to_pandas`` or
    ``from_pandas`` still loads it, because pyarrow retries the import there; and when perfsleuth's
    lazy pandas loads, it makes pyarrow retry (``_LoadThenTellArrow``), so ``pa.array`` of a pandas
    Series converts as it does where pandas was there from the start."""
    global _ARROW_LOOKED_WITHOUT_PANDAS
    if is_loaded("pandas") or _ARROW_LOOKED_WITHOUT_PANDAS:
        return
    lazy = sys.modules.pop("pandas", None)
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        import pyarrow as pa

        pa.array([0])  # pyarrow's look for pandas happens here, and fails (unless it looked before)
        _ARROW_LOOKED_WITHOUT_PANDAS = not is_loaded("pandas")
    finally:
        sys.meta_path.remove(finder)
        if lazy is not None:
            sys.modules["pandas"] = lazy


if TYPE_CHECKING:
    import pandas as pandas
else:
    pandas = lazy_module("pandas")
