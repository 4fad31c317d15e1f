# PYTHONSTARTUP of the notebook kernels that nbval starts (set in nbs/conftest.py): install tools/plotcheck.py,
# so that a figure whose line runs backwards in x fails the cell that shows it. Leaves no names behind.
def _install_plotcheck():
    import importlib.util, os, sys
    path = os.path.join(os.environ["LENGTHX_PLOTCHECK_DIR"], "plotcheck.py")
    spec = importlib.util.spec_from_file_location("plotcheck", path)
    mod = importlib.util.module_from_spec(spec); sys.modules["plotcheck"] = mod
    spec.loader.exec_module(mod)
    mod.install()


_install_plotcheck()
del _install_plotcheck
