"""Encoder models from Python: forward() against the transformers float64 references of the
conformance folders (BERT with its pooler, NomicBERT, ModernBERT), embed() against those
references' pooled rows, embed() and forward() on a synthetic BERT (batching, padding,
pooling, normalization, truncation, token-id inputs), Ctrl-C, and the errors."""

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import rlx


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def reference(folder: Path, name: str) -> tuple[list[int], np.ndarray]:
    seq = json.loads((folder / "manifest.json").read_text())["sequences"][name]
    return seq["token_ids"], np.fromfile(folder / f"hidden-{name}.f32", dtype="<f4").reshape(seq["shape"])


@pytest.fixture(scope="module")
def bert_tiny_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("encoders") / "bert-tiny.gguf"
    rlx.synth(str(path), preset="bert-tiny", seed=7)
    return str(path)


@pytest.fixture(scope="module")
def bert(bert_tiny_path: str) -> rlx.EncoderModel:
    model = rlx.load_model(bert_tiny_path, threads=2, compile_cache=False)
    assert isinstance(model, rlx.EncoderModel)
    return model


TEXTS = [
    "hello",
    "the quick brown fox jumps over the lazy dog",
    "a",
    "an embedding of a somewhat longer sentence, with punctuation and several words in it",
    "",
    "hello",
]


@pytest.mark.parametrize("family", ["bert", "nomic-bert", "modernbert"])
def test_forward_matches_transformers(conformance: Path, family: str) -> None:
    folder = conformance / "hf" / family
    model = rlx.load_model(str(folder), threads=2, compile_cache=False)
    assert isinstance(model, rlx.EncoderModel)
    ids7, ref7 = reference(folder, "s7")
    ids40, ref40 = reference(folder, "s40")
    # Both sequences in one run: s7 right-padded to 40 under an attention mask.
    input_ids = np.zeros((2, 40), dtype=np.int64)
    input_ids[0, :7] = ids7
    input_ids[1] = ids40
    mask = np.zeros((2, 40), dtype=np.int64)
    mask[0, :7] = 1
    mask[1] = 1
    out = model.forward(input_ids, attention_mask=mask)
    hidden = out["last_hidden_state"]
    assert hidden.dtype == np.float32 and hidden.shape == (2, 40, model.dim)
    # The conformance bar of the HF encoders (tests/integration): relative L2 <= 1e-4.
    assert rel_l2(hidden[0, :7], ref7) <= 1e-4
    assert rel_l2(hidden[1], ref40) <= 1e-4
    assert ("pooler_output" in out) == model.has_pooler == (family == "bert")
    if family == "bert":
        for row, name in ((0, "s7"), (1, "s40")):
            pooled = np.fromfile(folder / f"pooler-{name}.f32", dtype="<f4")
            assert out["pooler_output"].shape == (2, model.dim)
            assert rel_l2(out["pooler_output"][row], pooled) <= 1e-4
    # Alone, as a flat list: the same states.
    alone = model.forward(ids7)["last_hidden_state"]
    assert alone.shape == (1, 7, model.dim)
    assert rel_l2(alone[0], ref7) <= 1e-4


def test_embed_pools_the_reference_states(conformance: Path) -> None:
    folder = conformance / "hf" / "bert"
    model = rlx.load_model(str(folder), threads=2, compile_cache=False)
    assert model.pooling == "cls" and model.normalize is False
    ids7, ref7 = reference(folder, "s7")
    ids40, ref40 = reference(folder, "s40")
    cls = model.embed([ids7, ids40])
    assert cls.dtype == np.float32 and cls.shape == (2, model.dim)
    assert rel_l2(cls[0], ref7[0]) <= 1e-4 and rel_l2(cls[1], ref40[0]) <= 1e-4
    mean = model.embed([ids40, ids7], pooling="mean", normalize=True)
    want = ref40.astype(np.float64).mean(axis=0)
    assert rel_l2(mean[0], want / np.linalg.norm(want)) <= 1e-4
    assert abs(np.linalg.norm(mean[1]) - 1.0) <= 1e-5
    last = model.embed(ids7, pooling="last")  # a flat list of ids is one input
    assert last.shape == (1, model.dim) and rel_l2(last[0], ref7[-1]) <= 1e-4
    short = model.embed([ids7], dimensions=32)
    want = ref7[0, :32].astype(np.float64)
    assert short.shape == (1, 32) and rel_l2(short[0], want / np.linalg.norm(want)) <= 1e-4
    # This folder has no tokenizer.json: texts say so, token ids work.
    with pytest.raises(rlx.Error, match="tokenizer"):
        model.embed(["hello"])


def test_synthetic_bert_properties(bert: rlx.EncoderModel, bert_tiny_path: str) -> None:
    assert bert.arch == "bert" and bert.dim == 128 and bert.max_tokens == 128
    assert bert.pooling == "cls" and bert.normalize is False and bert.has_pooler is False
    assert bert.path == bert_tiny_path
    ids = bert.tokenize("hello world")
    assert len(ids) >= 3 and all(isinstance(i, int) for i in ids)


def test_embed_in_batches_equals_each_alone(bert: rlx.EncoderModel) -> None:
    together = bert.embed(TEXTS)
    assert together.dtype == np.float32 and together.shape == (len(TEXTS), bert.dim)
    assert together.flags["C_CONTIGUOUS"]
    for i, text in enumerate(TEXTS):
        np.testing.assert_allclose(together[i], bert.embed(text)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(together[0], together[5])
    assert not np.allclose(together[0], together[1])
    # Batches of at most 4 (sizes 4 and 2 here) give the same result.
    np.testing.assert_allclose(bert.embed(TEXTS, batch_size=4), together, rtol=1e-5, atol=1e-5)
    # Token ids of the same texts are the same inputs.
    ids = [bert.tokenize(t) for t in TEXTS]
    np.testing.assert_allclose(bert.embed(ids), together, rtol=1e-6, atol=1e-6)


def test_embed_pooling_agrees_with_forward(bert: rlx.EncoderModel) -> None:
    text = TEXTS[1]
    ids = bert.tokenize(text)
    states = bert.forward([ids])["last_hidden_state"][0].astype(np.float64)  # [n, dim]
    np.testing.assert_allclose(bert.embed(text)[0], states[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bert.embed(text, pooling="mean")[0], states.mean(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bert.embed(text, pooling="last")[0], states[-1], rtol=1e-5, atol=1e-5)
    unit = bert.embed(text, normalize=True)[0]
    np.testing.assert_allclose(unit, states[0] / np.linalg.norm(states[0]), rtol=1e-5, atol=1e-5)
    short = bert.embed(text, dimensions=16)[0]
    np.testing.assert_allclose(short, states[0, :16] / np.linalg.norm(states[0, :16]), rtol=1e-5, atol=1e-5)


def test_forward_padding_and_token_types(bert: rlx.EncoderModel) -> None:
    a, b = bert.tokenize(TEXTS[0]), bert.tokenize(TEXTS[3])
    n = len(b)
    ids = np.zeros((2, n), dtype=np.int32)
    ids[0, : len(a)] = a
    ids[1] = b
    mask = np.zeros((2, n), dtype=bool)
    mask[0, : len(a)] = True
    mask[1] = True
    padded = bert.forward(ids, attention_mask=mask)["last_hidden_state"]
    assert padded.shape == (2, n, bert.dim)
    np.testing.assert_allclose(padded[0, : len(a)], bert.forward(a)["last_hidden_state"][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(padded[1], bert.forward(b)["last_hidden_state"][0], rtol=1e-5, atol=1e-5)
    typed = bert.forward([b], token_type_ids=[[1] * n])["last_hidden_state"]
    assert not np.allclose(typed[0], padded[1])  # the token-type embedding is used


def test_long_texts_are_truncated_or_refused(bert: rlx.EncoderModel) -> None:
    text = " ".join(["word"] * 400)
    ids = bert.tokenize(text)
    assert len(ids) > bert.max_tokens
    cut = ids[: bert.max_tokens - 1] + [ids[-1]]  # the first tokens and the closing [SEP]
    np.testing.assert_allclose(bert.embed(text)[0], bert.embed([cut])[0], rtol=1e-6, atol=1e-6)
    with pytest.raises(rlx.Error, match=rf"has {len(ids)} tokens; the model takes at most {bert.max_tokens}"):
        bert.embed([TEXTS[0], text], truncate=False)
    with pytest.raises(rlx.Error, match="the model takes 1..128"):
        bert.embed([ids])  # token ids are never cut


def test_encoder_errors_are_python_exceptions(bert: rlx.EncoderModel, tiny_path: str) -> None:
    with pytest.raises(rlx.Error, match="no inputs"):
        bert.embed([])
    with pytest.raises(rlx.Error, match="no inputs"):
        bert.embed(np.zeros((0, 4), dtype=np.int64))
    with pytest.raises(TypeError, match="expected a str"):
        bert.embed(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="input 1 is a int"):
        bert.embed(["hello", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="input 0 is a float"):
        bert.embed([1.5, 2.5])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="ints"):
        bert.embed([[1.5, 2.5]])  # type: ignore[list-item]
    with pytest.raises(rlx.Error, match="input 1 has no tokens"):
        bert.embed([[2, 3], []])
    with pytest.raises(rlx.Error, match="outside the vocabulary"):
        bert.embed([[2, 99999]])
    with pytest.raises(rlx.Error, match="pooling .max. is not one of"):
        bert.embed("hello", pooling="max")  # type: ignore[arg-type]
    with pytest.raises(rlx.Error, match="dimensions must be 1..128"):
        bert.embed("hello", dimensions=129)
    with pytest.raises(rlx.Error, match="batch size must be 1..4096"):
        bert.embed("hello", batch_size=0)
    with pytest.raises(TypeError, match="input_ids: expected integers"):
        bert.forward(np.ones((1, 3), dtype=np.float32))
    with pytest.raises(rlx.Error, match="row 0 must be ones then zeros"):
        bert.forward([[2, 5, 3]], attention_mask=[[1, 0, 1]])
    with pytest.raises(rlx.Error, match="masks every token"):
        bert.forward([[2, 5, 3]], attention_mask=[[0, 0, 0]])
    with pytest.raises(rlx.Error, match="differs from input_ids"):
        bert.forward([[2, 5, 3]], token_type_ids=[[0, 0]])
    with pytest.raises(rlx.Error, match="token type 7 is outside"):
        bert.forward([[2, 5, 3]], token_type_ids=[[0, 7, 0]])
    with pytest.raises(rlx.Error, match="empty batch"):
        bert.forward(np.zeros((1, 0), dtype=np.int64))
    # A language model refuses to embed, saying why.
    lm = rlx.load_model(tiny_path, ctx=64, threads=2, compile_cache=False)
    assert isinstance(lm, rlx.Model)
    with pytest.raises(rlx.Error, match="needs an encoder model .* llama language model"):
        lm.embed(["hello"])
    assert bert.embed("still usable").shape == (1, bert.dim)


def test_ctrl_c_interrupts_embed(bert_tiny_path: str) -> None:
    # A child embeds far more sequences than it could before the signal (one per run),
    # says "started" from a helper thread while the main thread is inside embed() and gets
    # SIGINT: it must end with KeyboardInterrupt, and the model must be usable afterwards.
    child = textwrap.dedent(f"""
        import signal, sys, threading, time, rlx
        # Python leaves SIGINT alone when its parent ignores it (a CI job started in the
        # background does): install the handler that raises KeyboardInterrupt explicitly.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        model = rlx.load_model({bert_tiny_path!r}, threads=1, compile_cache=False)
        model.embed([[2] * 128])  # compile before the long run
        threading.Thread(target=lambda: (time.sleep(0.2), print("started", flush=True)), daemon=True).start()
        try:
            model.embed([[2] * 128] * 50000, batch_size=1)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            print(model.embed("hello").shape[1], flush=True)
            sys.exit(3)
        print("finished", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started", proc.communicate(timeout=120)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)  # bounds a hang only
    assert proc.returncode == 3, (out, err)
    assert out.split() == ["interrupted", "128"]
