__version__ = "0.1.0"

# `import lengthx` stays light (no torch until it is needed); a submodule loads on first use, so that
# `lengthx.attention.known_pes()` works after a plain `import lengthx`. Hand-written: nbdev_export only
# rewrites the `__version__` line of this file.
import importlib as _importlib
import pkgutil as _pkgutil

_SUBMODULES = tuple(m.name for m in _pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def __getattr__(name: str):
    "Import the submodule `lengthx.<name>` on first access."
    if name in _SUBMODULES: return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]: return sorted(list(globals()) + list(_SUBMODULES))
