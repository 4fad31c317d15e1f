# The positional-encoding families, one module each; a module loads on first use, so that
# `lengthx.pe.rotary.rope_inv_freq` works after a plain `import lengthx`. Hand-written: nbdev_export does not touch it.
import importlib as _importlib
import pkgutil as _pkgutil

_SUBMODULES = tuple(m.name for m in _pkgutil.iter_modules(__path__))


def __getattr__(name: str):
    "Import the submodule `lengthx.pe.<name>` on first access."
    if name in _SUBMODULES: return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]: return sorted(list(globals()) + list(_SUBMODULES))
