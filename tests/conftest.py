"""Test-session settings: one torch thread in every test process (2 pytest-xdist workers on 2 cores would otherwise
oversubscribe the CPU and run many times slower, and the fault tests compare, bit for bit, weights trained in this
process with weights trained in a one-thread subprocess: a GEMM split over another number of threads, or over fewer
threads when MKL adapts to the machine's load, rounds differently), and a throwaway token cache."""
import os

os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
os.environ["MKL_DYNAMIC"] = "FALSE"
import torch  # noqa: E402  (after the thread settings, which the OpenMP and MKL runtimes read once)

torch.set_num_threads(1)
os.environ.setdefault("MPLBACKEND", "Agg")
