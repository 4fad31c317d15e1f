"""Test-session settings: one torch thread per pytest-xdist worker (2 workers on 2 cores would
otherwise oversubscribe the CPU and run many times slower), and a throwaway token cache."""
import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    torch.set_num_threads(1)
os.environ.setdefault("MPLBACKEND", "Agg")
