"""A tiny model and a small code corpus shared by the training tests (single and distributed)."""
from lengthx.data import ByteTokenizer
from lengthx.train import TrainConfig
from lengthx.model import GPTConfig

MODEL = GPTConfig(n_layer=1, n_head=2, d_model=32, pe="alibi", max_len=32)
TOKENS = ByteTokenizer().encode_documents([
    "def add(a, b):\n    return a + b\n\nclass Point:\n    x: int = 0\n    y: int = 0\n" * 40,
    "import os.path\nprint(os.path.join('a', 'b'))\n" * 40])


def train_cfg(**kw) -> TrainConfig:
    "A short CPU run on 4 x 32 tokens; keyword arguments override any field."
    base = dict(steps=20, batch_size=4, length=32, lr=3e-3, min_lr=3e-4, warmup=4, seed=0, device="cpu", log_every=1)
    return TrainConfig(**{**base, **kw})
