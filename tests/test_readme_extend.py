"""The README's "Extend your own Hugging Face model": the families it calls supported are the ones `extend` honours,
the ones it calls refused are refused, and its example names the real API."""
import ast
import re
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
transformers.utils.logging.set_verbosity_error()

import lengthx.pretrained as P
from lengthx.attention import parse_spec

ROOT = Path(__file__).resolve().parents[1]


def section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## Extend your own Hugging Face model\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README.md has no 'Extend your own Hugging Face model' section"
    return m.group(1)


def named(label: str) -> set[str]:
    "The family names listed after **label** up to the paragraph's end, as TINY_FAMILIES spells them."
    para = re.search(rf"\*\*{label}\*\*(.*?)(?=\n\n|\*\*|\Z)", section(), re.S).group(1)
    return {f for f in P.TINY_FAMILIES if re.search(rf"(?<![\w-]){re.escape(f.split(',')[0])}(?![\w-]| \d)", para)}


def test_supported_and_refused_families_are_what_extend_does():
    refused = set()
    for family in P.TINY_FAMILIES:
        model = P.tiny_hf(family)
        try:
            with P.extend(model, "rope"): pass
        except ValueError: refused.add(family)
    honoured = {f.split(",")[0] for f in P.TINY_FAMILIES if f not in refused}
    assert named("Supported families") == {f for f in P.TINY_FAMILIES if f.split(",")[0] in honoured}
    assert named("Refused") == refused and refused        # GPT-2, BLOOM, Falcon as of this writing


def test_the_example_uses_the_real_api_and_a_valid_spec():
    code = re.search(r"```python\n(.*?)```", section(), re.S).group(1)
    tree = ast.parse(code)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "lengthx.pretrained"
                for a in n.names}
    assert imported and all(hasattr(P, name) for name in imported), imported
    specs = re.findall(r'extend\(model, "([^"]+)"\)', code)
    assert specs and all(parse_spec(s)[0] for s in specs)
    assert 6 <= len(code.strip().splitlines()) <= 10
    assert 'pip install -e ".[pretrained]"' in section()
    assert "pretrained_requirements" in (ROOT / "settings.ini").read_text()          # the extra the install line names
