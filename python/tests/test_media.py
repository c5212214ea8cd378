"""Vision, audio and segmentation models from Python: rlx.load_model on the dinov2,
wav2vec2 and sam folders of the conformance data (skipped without it) matches the float64
transformers references, SAM encodes once and decodes many prompts, segment() returns a
mask of the image's size, and bad prompts raise rlx.Error."""

from pathlib import Path

import numpy as np
import pytest

import rlx


def hf(conformance: Path, name: str) -> Path:
    d = conformance / "hf" / name
    if not (d / "manifest.json").is_file():
        pytest.skip(f"{d} not found")
    return d


def f32(path: Path) -> np.ndarray:
    return np.fromfile(path, dtype="<f4")


def rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64).ravel()
    want = np.asarray(want, dtype=np.float64).ravel()
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def test_dinov2_and_wav2vec2_forward_match_transformers(conformance: Path) -> None:
    d = hf(conformance, "dinov2")
    model = rlx.load_model(str(d), compile_cache=False)
    assert isinstance(model, rlx.MediaModel) and model.arch == "dinov2"
    out = model.forward(f32(d / "pixels-img56.f32").reshape(1, 3, 56, 56))
    assert out["last_hidden_state"].shape == (1, 17, 128)
    assert rel_l2(out["last_hidden_state"], f32(d / "hidden-img56.f32")) <= 1e-4
    assert rel_l2(out["pooler_output"], f32(d / "pooler-img56.f32")) <= 1e-4
    w = hf(conformance, "wav2vec2")
    audio = rlx.load_model(str(w), compile_cache=False)
    assert audio.input_name == "input_values"
    hidden = audio.forward(f32(w / "audio-a1600.f32").reshape(1, 1600))["last_hidden_state"]
    assert hidden.shape == (1, 79, 128)
    assert rel_l2(hidden, f32(w / "hidden-a1600.f32")) <= 1e-4


def test_sam_matches_transformers_and_prompts_an_encoding_many_times(conformance: Path) -> None:
    d = hf(conformance, "sam")
    model = rlx.load_model(str(d), compile_cache=False)
    assert isinstance(model, rlx.SamModel) and model.image_size == 128
    pixels = f32(d / "pixels.f32").reshape(1, 3, 128, 128)
    point = np.array([[[[40.0, 60.0]]]], dtype=np.float32)
    out = model.forward(pixels, input_points=point)
    assert out["pred_masks"].shape == (1, 1, 3, 32, 32)
    for name in ("image_embeddings", "pred_masks", "iou_scores"):
        assert rel_l2(out[name], f32(d / f"{name}.f32")) <= 1e-4, name
    embeddings = model.encode(pixels)
    two = model.decode(embeddings, input_points=np.concatenate([point, point], axis=1),
                       input_labels=np.ones((1, 2, 1), dtype=np.int32))
    assert two["pred_masks"].shape == (1, 2, 3, 32, 32)
    for p in range(2):
        assert rel_l2(two["pred_masks"][0, p], f32(d / "pred_masks.f32")) <= 1e-4
    boxed = model.decode(embeddings, input_boxes=np.array([[[10.0, 20.0, 90.0, 100.0]]]), multimask=False)
    assert boxed["pred_masks"].shape == (1, 1, 1, 32, 32) and np.isfinite(boxed["pred_masks"]).all()


def test_sam_segment_and_bad_prompts(conformance: Path) -> None:
    model = rlx.load_model(str(hf(conformance, "sam")), compile_cache=False)
    image = np.zeros((45, 60, 3), dtype=np.uint8)
    image[10:30, 20:40] = (220, 30, 30)
    mask, iou = model.segment(image, points=[[30, 20]], box=[18, 8, 42, 32])
    assert mask.shape == (45, 60) and mask.dtype == np.uint8
    assert set(np.unique(mask)) <= {0, 255} and isinstance(iou, float)
    embeddings = model.encode(np.zeros((1, 3, 128, 128), dtype=np.float32))
    with pytest.raises(rlx.Error, match="input_labels value 7"):
        model.decode(embeddings, input_points=[[[[1.0, 2.0]]]], input_labels=[[[7]]])
    with pytest.raises(rlx.Error, match="a prompt needs points or a box"):
        model.decode(embeddings)
    with pytest.raises(rlx.Error, match=r"pixel_values must be \[batch, 3, 128, 128\]"):
        model.encode(np.zeros((1, 3, 64, 64), dtype=np.float32))
    with pytest.raises(TypeError, match="image must be a uint8 array"):
        model.segment(np.zeros((10, 10), dtype=np.uint8), points=[[1, 1]])
