"""Graphs from NumPy: IR text and the builder, compiled and run, checked against NumPy;
zero-copy inputs and outputs; dtypes; errors as rlx.Error / TypeError with the message."""

import numpy as np
import pytest

import rlx

LINEAR_SILU = """
graph {
  %x = input "x" : f32[4, 8]
  %w = param "w" : f32[16, 8]
  %y = matmul %x, %w {transpose_a=false, transpose_b=true} : f32[4, 16]
  %z = activation.silu %y : f32[4, 16]
  output %z "z"
}
"""


def silu(v: np.ndarray) -> np.ndarray:
    return v / (1.0 + np.exp(-v))


@pytest.fixture()
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_version() -> None:
    assert rlx.__version__.count(".") == 2
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("rlx")
    except PackageNotFoundError:
        return  # run from the source tree, not installed: no metadata to compare
    assert installed == rlx.__version__  # setup.py and the C++ library agree


def test_ir_text_graph_matches_numpy(rng: np.random.Generator) -> None:
    g = rlx.Session("cpu").compile(LINEAR_SILU)
    assert [(s.name, s.dtype, s.shape) for s in g.inputs] == [("x", "f32", (4, 8))]
    assert [s.name for s in g.params] == ["w"]
    w = rng.standard_normal((16, 8), dtype=np.float32)
    x = rng.standard_normal((4, 8), dtype=np.float32)
    g.set_param("w", w)
    out = g.run({"x": x})
    assert list(out) == ["z"]
    assert out["z"].dtype == np.float32 and out["z"].shape == (4, 16)
    np.testing.assert_allclose(out["z"], silu(x @ w.T), rtol=1e-5, atol=1e-5)


def test_builder_graph_matches_numpy(rng: np.random.Generator) -> None:
    b = rlx.GraphBuilder()
    x = b.input("x", "f32", [3, 32])
    w = b.param("w", "f32", [8, 32])
    bias = b.param("b", "f32", [8])
    h = b.linear(x, w, bias, act="relu")
    scale = b.constant(np.full([8], 0.5, dtype=np.float32))
    b.output(b.softmax(h * scale), "p")
    b.output(b.reduce("sum", h, [1], keep_dims=True), "s")
    assert h.shape == (3, 8) and h.dtype == "f32"
    g = rlx.Session().compile(b.build())
    wv = rng.standard_normal((8, 32)).astype(np.float32)
    bv = rng.standard_normal(8).astype(np.float32)
    xv = rng.standard_normal((3, 32)).astype(np.float32)
    g.set_param("w", wv)
    g.set_param("b", bv)
    out = g.run({"x": xv})
    hv = np.maximum(xv @ wv.T + bv, 0)
    e = np.exp(hv * 0.5 - (hv * 0.5).max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["p"], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["s"], hv.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-4)


def test_symbolic_dims_are_bound_at_compile(rng: np.random.Generator) -> None:
    text = LINEAR_SILU.replace("f32[4, ", "f32[SEQ, ")
    g = rlx.Session().compile(text, bindings={"SEQ": 2})
    assert g.inputs[0].shape == (2, 8)
    w = rng.standard_normal((16, 8), dtype=np.float32)
    x = rng.standard_normal((2, 8), dtype=np.float32)
    g.set_param("w", w)
    np.testing.assert_allclose(g.run({"x": x})["z"], silu(x @ w.T), rtol=1e-5, atol=1e-5)


def test_contiguous_input_is_not_copied(rng: np.random.Generator) -> None:
    g = rlx.Session().compile(LINEAR_SILU)
    w = rng.standard_normal((16, 8), dtype=np.float32)
    g.set_param("w", w)
    x = rng.standard_normal((4, 8), dtype=np.float32)
    out = g.run({"x": x})
    assert g.input_pointers["x"] == x.ctypes.data  # the runtime read the caller's buffer
    # The output array is a view of the runtime's result buffer (no copy into NumPy).
    assert not out["z"].flags.owndata and out["z"].base is not None
    # A strided view (or another dtype) is converted once: a different buffer, same result.
    wide = rng.standard_normal((4, 16), dtype=np.float32)
    strided = wide[:, ::2]
    out2 = g.run({"x": strided})
    assert g.input_pointers["x"] != strided.ctypes.data
    np.testing.assert_allclose(out2["z"], silu(strided @ w.T), rtol=1e-5, atol=1e-5)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(g.run({"x": x64})["z"], out["z"], rtol=1e-6)
    assert g.input_pointers["x"] != x64.ctypes.data


class HostTensor:
    """A minimal DLPack producer in host memory (as a CPU torch tensor presents itself)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, stream=None, **kwargs):  # noqa: ANN001, ANN003, ANN204
        return self.array.__dlpack__()

    def __dlpack_device__(self):  # noqa: ANN204
        return self.array.__dlpack_device__()


class DeviceTensor(HostTensor):
    def __dlpack_device__(self):  # noqa: ANN204
        return (2, 0)  # kDLCUDA


def test_dlpack_in_and_out_without_copies(rng: np.random.Generator) -> None:
    g = rlx.Session().compile(LINEAR_SILU)
    w = rng.standard_normal((16, 8), dtype=np.float32)
    g.set_param("w", w)
    x = rng.standard_normal((4, 8), dtype=np.float32)
    out = g.run({"x": HostTensor(x)})
    assert g.input_pointers["x"] == x.ctypes.data  # the producer's buffer, not a copy
    np.testing.assert_allclose(out["z"], silu(x @ w.T), rtol=1e-5, atol=1e-5)
    # The outputs are DLPack producers too: a consumer sees the same memory.
    assert np.from_dlpack(out["z"]).ctypes.data == out["z"].ctypes.data
    with pytest.raises(TypeError, match="rlx takes host memory"):
        g.run({"x": DeviceTensor(x)})


def test_dtypes_f16_bf16_i32(rng: np.random.Generator) -> None:
    text = """
    graph {
      %ids = input "ids" : i32[3]
      %table = param "table" : bf16[5, 4]
      %h = input "h" : f16[3, 4]
      %e = gather %table, %ids {axis=0} : bf16[3, 4]
      %ef = cast %e : f32[3, 4]
      %hf = cast %h : f32[3, 4]
      %s = binary.add %ef, %hf : f32[3, 4]
      %o = cast %s : f16[3, 4]
      output %o "o"
      output %e "e"
      output %ids "ids_out"
    }
    """
    g = rlx.Session().compile(text)
    table = rng.standard_normal((5, 4)).astype(np.float32)
    g.set_param("table", table)  # float32 values rounded to bf16
    ids = np.array([4, 0, 2], dtype=np.int32)
    h = rng.standard_normal((3, 4)).astype(np.float16)
    out = g.run({"ids": ids, "h": h})
    assert g.input_pointers["ids"] == ids.ctypes.data
    assert g.input_pointers["h"] == h.ctypes.data
    table_bf16 = (table.view(np.uint32) + 0x7FFF + ((table.view(np.uint32) >> 16) & 1)) & 0xFFFF0000
    rows = table_bf16.view(np.float32)[ids]
    assert out["e"].dtype == np.float32  # bf16 outputs come back widened
    np.testing.assert_array_equal(out["e"], rows)
    assert out["o"].dtype == np.float16
    np.testing.assert_array_equal(out["o"], (rows + h.astype(np.float32)).astype(np.float16))
    np.testing.assert_array_equal(out["ids_out"], ids)
    assert out["ids_out"].dtype == np.int32


def test_errors_carry_the_message(rng: np.random.Generator) -> None:
    with pytest.raises(rlx.Error, match="line 2") as e:
        rlx.parse_graph("graph {\n  %x = bogus_op %y\n}")
    assert isinstance(e.value, RuntimeError) and e.value.code == "parse"
    with pytest.raises(rlx.Error, match="unknown device|device"):
        rlx.Session("quantum")
    g = rlx.Session().compile(LINEAR_SILU)
    with pytest.raises(rlx.Error, match="unknown input 'y'"):
        g.run({"y": np.zeros((4, 8), np.float32)})
    with pytest.raises(rlx.Error, match=r"input 'x'.*f32\[4, 8\]"):
        g.run({"x": np.zeros((4, 9), np.float32)})
    with pytest.raises(rlx.Error, match="missing"):
        g.run({})
    with pytest.raises(rlx.Error, match="unknown param 'v'"):
        g.set_param("v", np.zeros((16, 8), np.float32))
    with pytest.raises(rlx.Error, match=r"param 'w': expected f32\[16, 8\], got an array of shape \[8, 16\]"):
        g.set_param("w", np.zeros((8, 16), np.float32))
    with pytest.raises(TypeError, match="input 'x'"):
        g.run({"x": np.array([["a"] * 8] * 4)})
    b = rlx.GraphBuilder()
    x = b.input("x", "f32", [4, 8])
    y = b.input("y", "f32", [5, 3])
    with pytest.raises(rlx.Error, match="matmul"):
        b.matmul(x, y)
    other = rlx.GraphBuilder()
    with pytest.raises(rlx.Error, match="unknown activation 'swish'"):
        other.activation("swish", other.input("x", "f32", [1]))
    with pytest.raises(rlx.Error, match="another GraphBuilder"):
        x + rlx.GraphBuilder().input("x", "f32", [4, 8])
