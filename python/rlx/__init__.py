"""RLX from Python: compile and run graphs on NumPy arrays, load language models and generate,
load encoder models and embed, run vision / audio encoders and Segment Anything.

    import rlx
    model = rlx.load_model("model.gguf", ctx=1024)
    print(model.generate("Once upon a time", max_tokens=32))

    encoder = rlx.load_model("bge-small.gguf")       # an rlx.EncoderModel
    vectors = encoder.embed(["first text", "second text"])  # float32 [2, dim]

    sam = rlx.load_model("sam-vit-base")              # an rlx.SamModel (HF folder)
    mask, iou = sam.segment(rgb_uint8_image, points=[[400, 650]])

The compiled core is the extension module ``rlx._rlx`` (pybind11, over RLX's C++ API);
this package re-exports it. Errors from RLX raise :class:`rlx.Error` (a RuntimeError)
with the C++ message.
"""

from ._rlx import (
    CompiledGraph,
    EncoderModel,
    Error,
    Graph,
    GraphBuilder,
    MediaModel,
    Model,
    SamModel,
    Session,
    TensorSpec,
    TextStream,
    Value,
    __version__,
    load_model,
    parse_graph,
    synth,
)

__all__ = [
    "CompiledGraph",
    "EncoderModel",
    "Error",
    "Graph",
    "GraphBuilder",
    "MediaModel",
    "Model",
    "SamModel",
    "Session",
    "TensorSpec",
    "TextStream",
    "Value",
    "__version__",
    "load_model",
    "parse_graph",
    "synth",
]
