"""The CUDA device from Python (each test skips without a CUDA build or a GPU): compiled
graphs against NumPy, a language model's logits against the CPU's and llama.cpp's
reference, generation on the device, and the errors of a wrong device."""

import json
from pathlib import Path

import numpy as np
import pytest

import rlx


@pytest.fixture(scope="module")
def cuda() -> rlx.Session:
    try:
        return rlx.Session("cuda")
    except rlx.Error as e:
        pytest.skip(f"no CUDA device or no CUDA build: {e}")


def silu(v: np.ndarray) -> np.ndarray:
    return v / (1.0 + np.exp(-v))


def test_graph_on_cuda_matches_numpy(cuda: rlx.Session) -> None:
    rng = np.random.default_rng(3)
    b = rlx.GraphBuilder()
    x = b.input("x", "f32", [37, 64])
    w = b.param("w", "f32", [48, 64])
    bias = b.param("b", "f32", [48])
    h = b.linear(x, w, bias, act="silu")
    b.output(h, "h")
    b.output(b.softmax(h), "p")
    g = cuda.compile(b.build())
    assert g.device.startswith("cuda")
    wv = rng.standard_normal((48, 64), dtype=np.float32)
    bv = rng.standard_normal(48, dtype=np.float32)
    xv = rng.standard_normal((37, 64), dtype=np.float32)
    g.set_param("w", wv)
    g.set_param("b", bv)
    out = g.run({"x": xv})
    ref = silu(xv.astype(np.float64) @ wv.T.astype(np.float64) + bv)
    assert out["h"].dtype == np.float32 and out["h"].shape == (37, 48)
    np.testing.assert_allclose(out["h"], ref, rtol=1e-4, atol=1e-4)
    e = np.exp(ref - ref.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["p"], e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)
    # A second run with new inputs reuses the compiled executable (and its CUDA graph).
    out2 = g.run({"x": xv * 2})
    np.testing.assert_allclose(out2["h"], silu(2 * xv.astype(np.float64) @ wv.T + bv), rtol=1e-4, atol=1e-4)


def test_symbolic_rows_and_f16_on_cuda(cuda: rlx.Session) -> None:
    rng = np.random.default_rng(4)
    text = """
    graph {
      %x = input "x" : f16[SEQ, 32]
      %w = param "w" : f16[16, 32]
      %y = matmul %x, %w {transpose_a=false, transpose_b=true} : f16[SEQ, 16]
      output %y "y"
    }
    """
    for rows in (1, 5, 64):
        g = cuda.compile(text, bindings={"SEQ": rows})
        x = rng.standard_normal((rows, 32)).astype(np.float16)
        w = rng.standard_normal((16, 32)).astype(np.float16)
        g.set_param("w", w)
        y = g.run({"x": x})["y"]
        assert y.dtype == np.float16 and y.shape == (rows, 16)
        np.testing.assert_allclose(y.astype(np.float32), x.astype(np.float32) @ w.astype(np.float32).T,
                                   rtol=2e-2, atol=2e-2)


def test_model_logits_on_cuda_match_cpu(cuda: rlx.Session, tiny_path: str) -> None:
    gpu = rlx.load_model(tiny_path, device="cuda", ctx=256, compile_cache=False)
    cpu = rlx.load_model(tiny_path, device="cpu", ctx=256, threads=2, compile_cache=False)
    ids = cpu.tokenize("Once upon a time there was a little")
    lg, lc = gpu.logits(ids), cpu.logits(ids)
    assert lg.shape == lc.shape == (len(ids), cpu.n_vocab)
    rel = np.linalg.norm(lg - lc, axis=1) / np.linalg.norm(lc, axis=1)
    assert rel.max() <= 1e-4


def test_generation_on_cuda(cuda: rlx.Session, tiny_path: str) -> None:
    gpu = rlx.load_model(tiny_path, device="cuda", ctx=256, compile_cache=False)
    for kw in (dict(temperature=0.0), dict(temperature=0.8, top_p=0.9, seed=5)):
        text = gpu.generate("Once upon a time", max_tokens=24, ignore_eos=True, **kw)
        pieces = list(gpu.generate("Once upon a time", max_tokens=24, ignore_eos=True, stream=True, **kw))
        assert text and "".join(pieces) == text


def test_stories260k_logits_on_cuda_match_llama_cpp(cuda: rlx.Session, conformance: Path) -> None:
    manifest = json.loads((conformance / "refs" / "stories260K-F32__tok512-8__kvf32.json").read_text())
    ref = np.fromfile(conformance / manifest["logits"]["file"], dtype="<f4").reshape(manifest["logits"]["shape"])
    model = rlx.load_model(str(conformance / manifest["model"]["file"]), device="cuda",
                           ctx=manifest["settings"]["n_ctx"], compile_cache=False)
    logits = model.logits(manifest["sequence"]["token_ids"])
    # The conformance tolerance of f32 weights with an f32 KV cache (tests/integration).
    assert np.abs(logits - ref).max() <= 1e-3
    assert (logits.argmax(axis=1) == ref.argmax(axis=1)).all()


def test_a_device_that_does_not_exist_is_an_error(cuda: rlx.Session) -> None:
    with pytest.raises(rlx.Error, match="cuda:99"):
        rlx.Session("cuda:99")
