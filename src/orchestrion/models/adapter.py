"""LoRA adapters for llama.cpp: convert a PEFT adapter (trained on the HF weights) to GGUF.

llama.cpp applies a LoRA adapter from a GGUF file whose tensors are named after the
base model's (``blk.{i}.attn_q.weight.lora_a`` / ``.lora_b``) and whose metadata says
``general.type = adapter``, ``adapter.type = lora`` and ``adapter.lora.alpha``; it scales
each ``B @ A`` by ``alpha / rank``.

One subtlety: when a Hugging Face Llama checkpoint is converted to GGUF, the rows of
``q_proj`` and ``k_proj`` are reordered (per head, the two rotary halves are interleaved)
to suit llama.cpp's RoPE. The HF weights we train on were un-permuted on the way in
(``transformers`` does this when it loads a GGUF), so the output rows of a LoRA delta on
q/k, that is the rows of ``lora_b``, must be permuted the same way on the way back.

Only numpy, safetensors and gguf are needed here (no torch), imported inside functions.
This lives in ``models/`` because loading a model with an adapter resolves (and, for a PEFT
directory, converts) it; :mod:`orchestrion.train.adapter` re-exports it for training code.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

ADAPTER_GGUF = "adapter.gguf"

# Hugging Face Llama module -> llama.cpp tensor (inside blk.{i})
MODULE_NAMES: dict[str, str] = {
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_output",
    "gate_proj": "ffn_gate",
    "up_proj": "ffn_up",
    "down_proj": "ffn_down",
}

_KEY = re.compile(
    r"^(?:base_model\.model\.)?model\.layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\.(?P<module>\w+)"
    r"\.lora_(?P<ab>[AB])(?:\.[\w-]+)?\.weight$"
)


@dataclass(frozen=True)
class BaseShape:
    """What the converter needs to know about the base GGUF model."""

    arch: str
    n_head: int
    n_head_kv: int
    tensor_shapes: Mapping[str, tuple[int, int]]  # name -> (out, in), numpy order (read-only: shared)


def permute_rows(weights: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """HF -> GGUF row order of a q (``n_head_kv=None``) or k projection; works on ``lora_b`` too."""
    heads = n_head if n_head_kv is None else n_head_kv
    rows = weights.shape[0]
    if rows % (2 * heads):
        raise ConfigError(f"cannot permute {rows} rows over {heads} heads: the adapter does not match the base model")
    return (
        weights.reshape(heads, 2, rows // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def read_base(gguf_path: str | Path) -> BaseShape:
    """Architecture, head counts and 2-D tensor shapes of a base GGUF model (header only).

    gguf's reader parses every metadata field, the whole vocabulary included (about 5 s for
    SmolLM2 here), so the answer is kept per file, keyed on its size and modification time:
    a GRPO run converts its adapter at every step against the same base.
    """
    path = Path(gguf_path)
    try:
        st = path.stat()
    except OSError as exc:
        raise ConfigError(f"{gguf_path}: cannot read as GGUF ({exc})") from None
    return _read_base(str(path.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read_base(gguf_path: str, _size: int, _mtime_ns: int) -> BaseShape:
    import gguf

    try:
        reader = gguf.GGUFReader(gguf_path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{gguf_path}: cannot read as GGUF ({exc})") from None
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise ConfigError(f"{gguf_path}: no general.architecture in the GGUF metadata")
    n_head = _field(reader, f"{arch}.attention.head_count")
    n_head_kv = _field(reader, f"{arch}.attention.head_count_kv", n_head)
    if not isinstance(n_head, int) or not isinstance(n_head_kv, int):
        raise ConfigError(f"{gguf_path}: no {arch}.attention.head_count in the GGUF metadata")
    shapes = {t.name: (int(t.shape[1]), int(t.shape[0])) for t in reader.tensors if len(t.shape) == 2}
    return BaseShape(arch=arch, n_head=n_head, n_head_kv=n_head_kv, tensor_shapes=MappingProxyType(shapes))


def _field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _load_peft(peft_dir: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    config_path = peft_dir / "adapter_config.json"
    weights_path = peft_dir / "adapter_model.safetensors"
    if not config_path.is_file() or not weights_path.is_file():
        raise ConfigError(
            f"{peft_dir}: not a PEFT adapter (needs adapter_config.json and adapter_model.safetensors); "
            "train one with `orchestrion train sft`"
        )
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("peft_type", "LORA") != "LORA":
        raise ConfigError(
            f"{config_path}: peft_type {config.get('peft_type')} is not LORA; only LoRA converts to llama.cpp"
        )
    if config.get("use_dora"):
        raise ConfigError(f"{config_path}: DoRA adapters have no llama.cpp form; train with use_dora=False")
    try:
        from safetensors.numpy import load_file

        tensors = load_file(str(weights_path))
    except (TypeError, ValueError):  # bfloat16 and friends: numpy has no such dtype
        from safetensors.torch import load_file as load_torch

        tensors = {k: v.float().numpy() for k, v in load_torch(str(weights_path)).items()}
    return config, tensors


def _scale(config: dict[str, Any], key: str, rank: int) -> float:
    """PEFT's multiplier for ``B @ A`` of one module (alpha_pattern override, rsLoRA)."""
    module_path = key.split(".lora_", 1)[0]
    alpha = float(config.get("lora_alpha", 8))
    for pattern, value in (config.get("alpha_pattern") or {}).items():
        if re.match(rf"(.*\.)?({pattern})$", module_path):
            alpha = float(value)
            break
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def peft_to_gguf(
    peft_dir: str | Path, out_path: str | Path | None = None, *, base_gguf: str | Path | None = None
) -> Path:
    """Write the llama.cpp form of the PEFT LoRA adapter in ``peft_dir``; returns the .gguf path.

    ``base_gguf`` is the model the adapter will be applied to (default: the embedded
    SmolLM2); its head counts drive the q/k permutation and its tensor shapes are checked.
    """
    try:
        import gguf
        import numpy as np
    except ImportError as exc:
        raise ConfigError(
            f"converting a PEFT adapter needs the 'train' extra ({exc.name} is missing): "
            "pip install 'orchestrion[train]'"
        ) from None

    from .catalog import find_smollm2_gguf

    src = Path(peft_dir)
    out = Path(out_path) if out_path is not None else src / ADAPTER_GGUF
    config, tensors = _load_peft(src)
    base = read_base(base_gguf if base_gguf is not None else find_smollm2_gguf())
    pairs: dict[tuple[int, str], dict[str, Any]] = {}
    for key, value in tensors.items():
        m = _KEY.match(key)
        if m is None:
            raise ConfigError(
                f"{src}: tensor '{key}' has no llama.cpp LoRA equivalent "
                "(only q/k/v/o/gate/up/down projections convert)"
            )
        module = m["module"]
        if module not in MODULE_NAMES:
            raise ConfigError(f"{src}: LoRA on '{module}' cannot be converted; target only {', '.join(MODULE_NAMES)}")
        pairs.setdefault((int(m["layer"]), module), {"key": key})[m["ab"]] = value
    if not pairs:
        raise ConfigError(f"{src}: the adapter holds no LoRA tensors")
    gguf_alpha = float(config.get("lora_alpha", 8))
    writer = gguf.GGUFWriter(str(out), base.arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, gguf_alpha)
    for (layer, module), pair in sorted(pairs.items()):
        if "A" not in pair or "B" not in pair:
            raise ConfigError(f"{src}: layer {layer} {module} has only one of lora_A / lora_B")
        a = np.ascontiguousarray(pair["A"], dtype=np.float32)  # (r, in)
        b = np.asarray(pair["B"], dtype=np.float32)  # (out, r)
        name = f"blk.{layer}.{MODULE_NAMES[module]}.weight"
        _check_shapes(src, name, a, b, base)
        rank = a.shape[0]
        b = b * np.float32(_scale(config, pair["key"], rank) * rank / gguf_alpha)
        if module == "q_proj":
            b = permute_rows(b, base.n_head)
        elif module == "k_proj":
            b = permute_rows(b, base.n_head, base.n_head_kv)
        writer.add_tensor(f"{name}.lora_a", a)
        writer.add_tensor(f"{name}.lora_b", np.ascontiguousarray(b))
    out.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _check_shapes(src: Path, name: str, a: np.ndarray, b: np.ndarray, base: BaseShape) -> None:
    shape = base.tensor_shapes.get(name)
    if shape is None:
        raise ConfigError(f"{src}: the base model has no tensor {name}; the adapter was trained for another model")
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1] or (b.shape[0], a.shape[1]) != shape:
        raise ConfigError(
            f"{src}: {name}: lora_A {tuple(a.shape)} / lora_B {tuple(b.shape)} do not fit the base weight "
            f"{shape}; the adapter was trained for another model"
        )


def check_adapter_gguf(path: Path) -> None:
    """Fail with a clear message unless ``path`` is a GGUF LoRA adapter."""
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the adapter ({exc.strerror})") from None
    if magic != b"GGUF":
        raise ConfigError(f"{path}: not a GGUF file; pass the adapter.gguf written by `orchestrion train sft`")
    try:
        import gguf
    except ImportError:  # the embedded extra alone: llama.cpp will judge the file
        return
    try:
        reader = gguf.GGUFReader(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable GGUF file ({exc})") from None
    if _field(reader, "general.type") != "adapter" or _field(reader, "adapter.type") != "lora":
        raise ConfigError(
            f"{path}: a GGUF file but not a LoRA adapter (general.type={_field(reader, 'general.type')!r}); "
            "pass the adapter.gguf written by `orchestrion train sft`"
        )


def resolve_adapter(path: str | Path, *, base_gguf: str | Path | None = None) -> Path:
    """The llama.cpp adapter file for ``path``: a .gguf adapter, a dir holding adapter.gguf,
    or a PEFT adapter dir (converted into ``DIR/adapter.gguf`` on first use)."""
    p = Path(path).expanduser()
    if p.is_file():
        if p.suffix != ".gguf":
            raise ConfigError(f"{p}: expected a .gguf LoRA adapter or an adapter directory")
        check_adapter_gguf(p)
        return p
    if p.is_dir():
        found = p / ADAPTER_GGUF
        peft_weights = p / "adapter_model.safetensors"
        if found.is_file() and (not peft_weights.is_file() or found.stat().st_mtime >= peft_weights.stat().st_mtime):
            check_adapter_gguf(found)
            return found
        if (p / "adapter_config.json").is_file():
            return peft_to_gguf(p, found, base_gguf=base_gguf)
        raise ConfigError(f"{p}: no adapter.gguf and no PEFT adapter (adapter_config.json) in this directory")
    raise ConfigError(f"{p}: adapter not found; pass the directory written by `orchestrion train sft`")
