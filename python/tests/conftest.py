"""Shared fixtures of the rlx Python tests: the conformance data folder (../shared next to
the checkout, or RLX_CONFORMANCE_DIR, as the C++ integration tests find it) and a tiny
synthetic model written once per session."""

import os
from pathlib import Path

import pytest

import rlx

REPO = Path(__file__).resolve().parents[2]

# A ChatML-style template, so that chat() renders with the model's own template.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def conformance_dir() -> Path:
    env = os.environ.get("RLX_CONFORMANCE_DIR")
    return Path(env) if env else REPO.parent / "shared" / "conformance"


@pytest.fixture(scope="session")
def conformance() -> Path:
    d = conformance_dir()
    if not (d / "index.json").is_file():
        pytest.skip(f"conformance data not found at {d} (set RLX_CONFORMANCE_DIR)")
    return d


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("models") / "tiny.gguf"
    rlx.synth(str(path), preset="tiny", type="f32", seed=0, chat_template=CHAT_TEMPLATE)
    return str(path)


@pytest.fixture(scope="session")
def tiny(tiny_path: str) -> rlx.Model:
    return rlx.load_model(tiny_path, ctx=256, threads=2, compile_cache=False)
