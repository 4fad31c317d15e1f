"""A tiny model and a small code corpus shared by the training tests (single and distributed), and the training
process the fault-injection tests kill: `python -m _tiny worker RUN_DIR STEPS PAUSE FAULT`."""
import os
import sys
import tempfile
import time

import lengthx.train as T
from lengthx.data import ByteTokenizer
from lengthx.train import TrainConfig, train
from lengthx.model import GPTConfig

MODEL = GPTConfig(n_layer=1, n_head=2, d_model=32, pe="alibi", max_len=32)
TOKENS = ByteTokenizer().encode_documents([
    "def add(a, b):\n    return a + b\n\nclass Point:\n    x: int = 0\n    y: int = 0\n" * 40,
    "import os.path\nprint(os.path.join('a', 'b'))\n" * 40])


def train_cfg(**kw) -> TrainConfig:
    "A short CPU run on 4 x 32 tokens; keyword arguments override any field."
    base = dict(steps=20, batch_size=4, length=32, lr=3e-3, min_lr=3e-4, warmup=4, seed=0, device="cpu", log_every=1)
    return TrainConfig(**{**base, **kw})


# ---- fault injection (tests/test_faults.py) ----
EVERY, STEPS = 5, 30        # checkpoint interval and run length of the fault-injection runs


def fault_cfg(steps: int = STEPS, **kw) -> TrainConfig:
    return train_cfg(**{**dict(steps=steps, ckpt_every=EVERY, keep_last=2), **kw})


WRITES = {1: "model file", 2: "optimizer file", 3: "state file", 4: "checkpoint.json"}


def dying_write(at: int, n: int, die: callable):
    "An `atomic_write_bytes` that, on write `n` of the save at step `at`, leaves half the bytes in its temporary file and dies."
    target = {1: f"model-{at:08d}.safetensors", 2: f"optim-{at:08d}.safetensors", 3: f"ckpt-{at:08d}.json", 4: T.CKPT_JSON}
    real = T.atomic_write_bytes

    def write(path, data):
        if path.name == target[n] and (n != 4 or (path.parent / target[3]).exists()):
            fd, _ = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.write(fd, data[:len(data) // 2]); os.close(fd)
            die()
        real(path, data)
    return write


def worker(run_dir: str, steps: int, pause: float, fault: str) -> None:
    "Train in `run_dir`; `pause` seconds per step; fault 'save:STEP:N' dies (os._exit) halfway through write N of save STEP."
    if fault != "none":
        _, at, n = fault.split(":")
        T.atomic_write_bytes = dying_write(int(at), int(n), lambda: os._exit(137))
    train(MODEL, fault_cfg(steps), tokens=TOKENS, run_dir=run_dir, progress=False,
          callback=(lambda rec: time.sleep(pause)) if pause else None)


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "worker":
    worker(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
