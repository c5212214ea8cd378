# Type stubs of the rlx package (the extension module rlx._rlx), for editors and type
# checkers. Keep in step with python/src/*_bindings.cpp.
from typing import Any, Iterator, Literal, Mapping, NoReturn, Sequence, overload

import numpy as np
import numpy.typing as npt

__version__: str

class Error(RuntimeError):
    """An error reported by RLX; str(e) is the C++ message."""

    code: str
    """invalid_argument, invalid_file, not_found, unsupported, io, parse, verify or internal."""

class TensorSpec:
    """Name, dtype and shape of a compiled graph's input, param or output."""

    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int | str, ...]: ...

class Graph:
    """A graph of RLX IR."""

    @staticmethod
    def parse(text: str) -> Graph: ...

def parse_graph(text: str) -> Graph:
    """Parses a graph from the IR text form; errors name the line and column."""

class Value:
    """A value of a graph being built; +, -, *, / and @ add ops."""

    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int | str, ...]: ...
    def __add__(self, other: Value) -> Value: ...
    def __sub__(self, other: Value) -> Value: ...
    def __mul__(self, other: Value) -> Value: ...
    def __truediv__(self, other: Value) -> Value: ...
    def __matmul__(self, other: Value) -> Value: ...

class GraphBuilder:
    """Builds a Graph op by op; a bad op raises Error at once."""

    def __init__(self) -> None: ...
    def input(self, name: str, dtype: str, shape: Sequence[int | str]) -> Value: ...
    def param(self, name: str, dtype: str, shape: Sequence[int | str]) -> Value: ...
    def constant(self, values: npt.ArrayLike, dtype: str = "f32") -> Value: ...
    def activation(self, kind: str, x: Value) -> Value: ...
    def binary(self, kind: str, a: Value, b: Value) -> Value: ...
    def matmul(self, a: Value, b: Value, transpose_a: bool = False, transpose_b: bool = False) -> Value: ...
    def linear(self, x: Value, w: Value, bias: Value | None = None, act: str = "identity") -> Value: ...
    def softmax(self, x: Value, axis: int = -1) -> Value: ...
    def reduce(self, kind: str, x: Value, axes: Sequence[int], keep_dims: bool = False) -> Value: ...
    def rms_norm(self, x: Value, gamma: Value, eps: float = 1e-5) -> Value: ...
    def reshape(self, x: Value, shape: Sequence[int | str]) -> Value: ...
    def transpose(self, x: Value, perm: Sequence[int]) -> Value: ...
    def cast(self, x: Value, dtype: str) -> Value: ...
    def output(self, value: Value, name: str = "") -> None: ...
    def build(self) -> Graph: ...

class CompiledGraph:
    """A graph compiled for one device."""

    @property
    def inputs(self) -> list[TensorSpec]: ...
    @property
    def params(self) -> list[TensorSpec]: ...
    @property
    def outputs(self) -> list[TensorSpec]: ...
    @property
    def device(self) -> str: ...
    @property
    def input_pointers(self) -> dict[str, int]:
        """Data pointers the last run() handed to the runtime (array.ctypes.data when not copied)."""
    def set_param(self, name: str, values: npt.ArrayLike) -> None: ...
    def run(self, inputs: Mapping[str, npt.ArrayLike | Any]) -> dict[str, np.ndarray]:
        """Runs; C-contiguous inputs of the declared dtype are read in place (no copy), NumPy
        arrays or host-memory DLPack tensors (e.g. CPU torch tensors). The outputs are NumPy
        arrays viewing the result buffers; torch.from_dlpack takes them without a copy."""

class Session:
    """Compiles graphs for one device: "cpu", "cuda", "cuda:N" or "reference"."""

    def __init__(self, device: str = "cpu") -> None: ...
    @property
    def device(self) -> str: ...
    def compile(self, graph: Graph | str, bindings: Mapping[str, int] = ...) -> CompiledGraph: ...

class TextStream(Iterator[str]):
    """Text pieces of a streaming generation; close() (or Ctrl-C) ends it."""

    def __iter__(self) -> TextStream: ...
    def __next__(self) -> str: ...
    def close(self) -> None: ...
    def __enter__(self) -> TextStream: ...
    def __exit__(self, *args: object) -> None: ...

class Model:
    """A language model with its tokenizer (see load_model)."""

    @property
    def path(self) -> str: ...
    @property
    def arch(self) -> str: ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def context_length(self) -> int: ...
    def embed(self, *args: object, **kwargs: object) -> NoReturn:
        """Raises Error: embeddings need an encoder model (load_model returns an EncoderModel for one)."""
    def logits(self, tokens: Sequence[int] | npt.NDArray[np.integer]) -> npt.NDArray[np.float32]:
        """float32 [len(tokens), n_vocab] from an empty context; row i scores the token after tokens[0..i]."""
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]: ...
    def detokenize(self, tokens: Sequence[int] | npt.NDArray[np.integer], render_special: bool = False) -> str: ...
    @overload
    def generate(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: int = 0,
        stop: Sequence[str] | None = None,
        ignore_eos: bool = False,
        stream: Literal[False] = False,
        add_special: bool = True,
    ) -> str:
        """The continuation of `prompt` (text or token ids); temperature 0 is greedy."""
    @overload
    def generate(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: int = 0,
        stop: Sequence[str] | None = None,
        ignore_eos: bool = False,
        stream: Literal[True],
        add_special: bool = True,
    ) -> TextStream:
        """The continuation of `prompt` as a stream of text pieces."""
    @overload
    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        template: str = "",
        max_tokens: int = 256,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: int = 0,
        stop: Sequence[str] | None = None,
        stream: Literal[False] = False,
    ) -> str:
        """The assistant's reply, rendered with the model's template or a built-in one."""
    @overload
    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        template: str = "",
        max_tokens: int = 256,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: int = 0,
        stop: Sequence[str] | None = None,
        stream: Literal[True],
    ) -> TextStream:
        """The assistant's reply as a stream of text pieces."""

TokenIds = Sequence[int] | npt.NDArray[np.integer]
IntArray = Sequence[int] | Sequence[Sequence[int]] | npt.NDArray[np.integer] | npt.NDArray[np.bool_]

class EncoderModel:
    """An encoder model (BERT, NomicBERT, ModernBERT) with its tokenizer (see load_model)."""

    @property
    def path(self) -> str: ...
    @property
    def arch(self) -> str: ...
    @property
    def dim(self) -> int:
        """Width of the hidden states and embeddings."""
    @property
    def n_vocab(self) -> int: ...
    @property
    def max_tokens(self) -> int:
        """The longest sequence the model takes."""
    @property
    def pooling(self) -> str:
        """The default pooling of embed(): "cls", "mean" or "last", as the model's files say."""
    @property
    def normalize(self) -> bool:
        """Whether embed() L2-normalizes by default (a sentence-transformers Normalize module)."""
    @property
    def has_pooler(self) -> bool:
        """True when forward() also returns BERT's pooler_output."""
    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text` as embed() reads it ([CLS] text [SEP] for WordPiece)."""
    def embed(
        self,
        inputs: str | Sequence[str] | TokenIds | Sequence[TokenIds] | npt.NDArray[np.integer],
        *,
        pooling: Literal["cls", "mean", "last"] | None = None,
        normalize: bool | None = None,
        dimensions: int | None = None,
        batch_size: int = 32,
        truncate: bool = True,
    ) -> npt.NDArray[np.float32]:
        """float32 embeddings [n, dim] (dim: `dimensions` when given), in input order.

        inputs: a str, a list of str, a list of ints (one input of token ids, as OpenAI's
        API reads it), a list of token-id lists or a 2-D integer array. pooling and
        normalize default to the model's; dimensions keeps the first values and
        L2-normalizes them again. A text longer than max_tokens keeps its first tokens
        and its final [SEP] (truncate=False: raises Error); token ids are never cut.
        """
    def forward(
        self,
        input_ids: IntArray,
        attention_mask: IntArray | None = None,
        token_type_ids: IntArray | None = None,
    ) -> dict[str, npt.NDArray[np.float32]]:
        """One forward pass in Hugging Face's layout (input_ids [batch, n] or [n]; attention_mask
        ones then zeros per row). Returns "last_hidden_state" float32 [batch, n, dim] and, when
        has_pooler, "pooler_output" float32 [batch, dim]."""

FloatArray = npt.ArrayLike

class MediaModel:
    """A vision or audio encoder from a Hugging Face folder: DINOv2 or Wav2Vec2 (see load_model)."""

    @property
    def arch(self) -> str:
        """"dinov2" or "wav2vec2"."""
    @property
    def input_name(self) -> str:
        """pixel_values (DINOv2) or input_values (Wav2Vec2)."""
    @property
    def output_names(self) -> list[str]: ...
    @property
    def dim(self) -> int:
        """Width of the hidden states."""
    def forward(self, values: FloatArray) -> dict[str, npt.NDArray[np.float32]]:
        """pixel_values float32 [batch, 3, height, width] or input_values [batch, samples] to
        {"last_hidden_state": [batch, tokens, dim]} and, for DINOv2, "pooler_output": [batch, dim]."""

class SamModel:
    """Segment Anything from a Hugging Face folder (see load_model): encode an image once,
    prompt it many times."""

    @property
    def image_size(self) -> int:
        """Side of the square input the image encoder takes."""
    def encode(self, pixel_values: FloatArray) -> npt.NDArray[np.float32]:
        """image_embeddings [batch, channels, side, side] of pixel_values [batch, 3, S, S]."""
    def decode(
        self,
        image_embeddings: FloatArray,
        *,
        input_points: FloatArray | None = None,
        input_labels: IntArray | None = None,
        input_boxes: FloatArray | None = None,
        multimask: bool = True,
    ) -> dict[str, npt.NDArray[np.float32]]:
        """Masks of prompts on encode()'s output: points [batch, prompts, points, 2], labels
        [batch, prompts, points] (1 object, 0 background, -1 not a point; default 1), boxes
        [batch, prompts, 4]. Returns "pred_masks" [batch, prompts, 3 (or 1), 4g, 4g]
        (low-resolution logits) and "iou_scores" [batch, prompts, 3 (or 1)]."""
    def forward(
        self,
        pixel_values: FloatArray,
        *,
        input_points: FloatArray | None = None,
        input_labels: IntArray | None = None,
        input_boxes: FloatArray | None = None,
        multimask: bool = True,
    ) -> dict[str, npt.NDArray[np.float32]]:
        """encode() then decode(), as transformers' SamModel; also returns "image_embeddings"."""
    def segment(
        self,
        image: npt.NDArray[np.uint8],
        *,
        points: FloatArray | None = None,
        labels: IntArray | None = None,
        box: FloatArray | None = None,
        multimask: bool = True,
    ) -> tuple[npt.NDArray[np.uint8], float]:
        """One prompt on an RGB image uint8 [height, width, 3] (points [n, 2] and box [4] in
        its pixels): the best mask uint8 [height, width] (255 inside) and its predicted IoU."""

def load_model(
    path: str,
    *,
    device: str = "cpu",
    ctx: int = 512,
    kv: str = "f32",
    threads: int = 0,
    compile_cache: bool = True,
) -> Model | EncoderModel | MediaModel | SamModel:
    """Loads a GGUF file or a Hugging Face folder: an EncoderModel for an encoder (bert,
    nomic-bert, modern-bert), a MediaModel for dinov2 / wav2vec2, a SamModel for sam, else
    a Model. ctx and kv apply to language models only."""

def synth(
    path: str,
    *,
    arch: str = "",
    preset: str = "tiny",
    type: str = "f32",
    seed: int = 0,
    chat_template: str = "",
) -> None:
    """Writes a GGUF model with seeded random weights (as `rlx synth`)."""
