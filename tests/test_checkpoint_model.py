"""Models cockpit does not know, planned from their checkpoint's safetensors headers, and hybrid
attention (Qwen3-Next) planned from its config (docs/placement.md#models-cockpit-reads-from-their-checkpoint).

The checkpoints are written here byte by byte in the safetensors format (8-byte little-endian header
length, the JSON header, then the data), their data left as a sparse hole: cockpit reads headers only.
The Qwen3-Next config is https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json
(tests/fixtures/models/qwen3-next-80b-a3b-instruct.json).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import MODELS

from cockpit.core.archs import parse_config
from cockpit.core.checkpoint import CheckpointTensor, arch_from_checkpoint, classify_tensor
from cockpit.core.errors import CockpitError
from cockpit.core.hardware import hardware
from cockpit.core.model import (
    ATTN_REPLICATED,
    ATTN_SHARDED,
    DENSE_MLP,
    EMBEDDING,
    LM_HEAD,
    NORMS,
    ROUTED_EXPERTS,
    ROUTER,
    SHARED_EXPERTS,
    TENSOR_CLASSES,
)
from cockpit.core.planner import FAILS, Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.store.modelfiles import load_model, read_config
from cockpit.store.safetensors import MAX_HEADER_BYTES, read_checkpoint, read_header

BITS = {"BF16": 16, "F16": 16, "F32": 32, "F8_E4M3": 8, "U8": 8, "I8": 8, "I32": 32}
SKIP = "skip"  # tensors the engines do not load (multi-token prediction)


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> None:
    """A safetensors file as the library writes it: header padded with spaces to 8 bytes, data
    contiguous in header order (here a hole the filesystem does not store)."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * BITS[dtype] // 8
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as file:
        file.write(len(raw).to_bytes(8, "little"))
        file.write(raw)
        file.truncate(8 + len(raw) + offset)


def tensor_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * BITS[dtype] // 8


class Checkpoint:
    """Tensors with the class each belongs to, as this test (not cockpit) decides it."""

    def __init__(self) -> None:
        self.tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.classes: dict[str, str] = {}

    def add(self, cls: str, name: str, dtype: str, *shape: int) -> None:
        self.tensors[name] = (dtype, shape)
        self.classes[name] = cls

    def fp8(self, cls: str, name: str, out: int, inp: int) -> None:
        """A block-FP8 weight and its 128x128 scales, which go with the weight's class."""
        self.add(cls, f"{name}.weight", "F8_E4M3", out, inp)
        self.add(cls, f"{name}.weight_scale_inv", "F32", -(-out // 128), -(-inp // 128))

    def class_bytes(self) -> dict[str, int]:
        totals = dict.fromkeys(TENSOR_CLASSES, 0)
        for name, cls in self.classes.items():
            if cls != SKIP:
                totals[cls] += tensor_bytes(*self.tensors[name])
        return totals

    def save(self, folder: Path, config: dict, shards: int = 2) -> Path:
        """config.json and the tensors in ``shards`` files with a model.safetensors.index.json."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config))
        names = list(self.tensors)
        weight_map = {}
        for index in range(shards):
            shard = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
            part = names[index::shards]
            write_safetensors(folder / shard, {n: self.tensors[n] for n in part})
            weight_map.update(dict.fromkeys(part, shard))
        index_text = json.dumps({"metadata": {}, "weight_map": weight_map})
        (folder / "model.safetensors.index.json").write_text(index_text)
        return folder


# An architecture cockpit has never heard of: MLA-free GQA attention in FP8 blocks, one dense
# layer then MoE layers with shared experts, a vision tower, and an MTP layer the engines skip.
ACME_CONFIG = {
    "model_type": "acme_moe",
    "architectures": ["AcmeMoeForCausalLM"],
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1024,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
}


def acme_checkpoint(layers: int = 4, experts: int = 8) -> Checkpoint:
    ckpt = Checkpoint()
    h = 256
    ckpt.add(EMBEDDING, "model.embed_tokens.weight", "BF16", 1024, h)
    ckpt.add(LM_HEAD, "lm_head.weight", "BF16", 1024, h)
    ckpt.add(NORMS, "model.norm.weight", "BF16", h)
    ckpt.add(
        NORMS, "model.visual.blocks.0.attn.qkv.weight", "BF16", 3 * 64, 64
    )  # a tower: whole on every GPU
    for i in range(layers + 1):  # the last one is an MTP layer (index = num_hidden_layers)
        p = f"model.layers.{i}."
        mtp = i == layers
        ckpt.add(SKIP if mtp else NORMS, p + "input_layernorm.weight", "BF16", h)
        ckpt.add(SKIP if mtp else NORMS, p + "post_attention_layernorm.weight", "BF16", h)
        for proj, out in (("q_proj", 256), ("k_proj", 64), ("v_proj", 64)):
            ckpt.fp8(SKIP if mtp else ATTN_SHARDED, p + f"self_attn.{proj}", out, h)
        ckpt.fp8(SKIP if mtp else ATTN_SHARDED, p + "self_attn.o_proj", h, 256)
        ckpt.add(SKIP if mtp else NORMS, p + "self_attn.q_norm.weight", "BF16", 32)
        ckpt.add(SKIP if mtp else NORMS, p + "self_attn.k_norm.weight", "BF16", 32)
        if i == 0:
            for proj, shape in (("gate_proj", (512, h)), ("up_proj", (512, h)), ("down_proj", (h, 512))):
                ckpt.fp8(DENSE_MLP, p + f"mlp.{proj}", *shape)
            continue
        cls = (lambda c: SKIP) if mtp else (lambda c: c)
        ckpt.add(cls(ROUTER), p + "mlp.gate.weight", "BF16", experts, h)
        ckpt.add(cls(ROUTER), p + "mlp.gate.e_score_correction_bias", "F32", experts)
        for proj, shape in (("gate_proj", (256, h)), ("up_proj", (256, h)), ("down_proj", (h, 256))):
            ckpt.fp8(cls(SHARED_EXPERTS), p + f"mlp.shared_experts.{proj}", *shape)
            for e in range(experts):
                ckpt.fp8(cls(ROUTED_EXPERTS), p + f"mlp.experts.{e}.{proj}", *shape)
    ckpt.add(SKIP, "mtp.norm.weight", "BF16", h)
    return ckpt


@pytest.fixture
def acme(tmp_path):
    ckpt = acme_checkpoint()
    return ckpt, ckpt.save(tmp_path / "Acme-MoE", ACME_CONFIG)


def test_the_tensors_are_classified_as_the_test_says(acme):
    ckpt, folder = acme
    tensors = read_checkpoint(folder)
    assert tensors is not None and len(tensors) == len(ckpt.tensors)
    for tensor in tensors:
        assert tensor.nbytes == tensor_bytes(*ckpt.tensors[tensor.name]), tensor.name
        expected = ckpt.classes[tensor.name]
        if expected != SKIP:
            assert classify_tensor(tensor.name).cls == expected, tensor.name


def test_an_unknown_model_type_is_planned_from_its_checkpoint(acme):
    ckpt, folder = acme
    model = load_model(str(folder))
    assert model.family == "acme_moe" and model.architecture == "AcmeMoeForCausalLM"
    assert model.name == "Acme-MoE" and model.source == str(folder / "config.json")
    assert (model.layers, model.hidden, model.heads, model.kv_heads, model.head_dim) == (4, 256, 8, 2, 32)
    assert model.moe.experts == 8 and model.moe.experts_per_token == 2 and model.moe.moe_layers == 3
    assert model.moe.expert_intermediate == 256 and model.moe.shared_intermediate == 256
    assert model.dense_layers == 1 and model.dense_intermediate == 512
    assert model.quant.method == "fp8-block" and model.quant.block == (128, 128)
    assert not model.tied_embeddings and model.max_context == 8192
    # Every class holds exactly the bytes of its tensors; the MTP layer is left out, as the engines do.
    for cls, nbytes in ckpt.class_bytes().items():
        assert model.class_bytes(cls) == pytest.approx(nbytes, rel=1e-12), cls
    assert model.total_bytes == pytest.approx(sum(ckpt.class_bytes().values()), rel=1e-12)
    assert any("multi-token-prediction" in note for note in model.notes)
    # Parameters: FP8 weights are one byte each; the scales add bytes, not parameters.
    assert model.params[ROUTED_EXPERTS] == 3 * 8 * 3 * 256 * 256
    assert model.kv_bytes_per_token(2, attn_tp=1) == 4 * 2 * 2 * 32 * 2
    assert model.state_bytes_per_request(1) == 0


def expected_per_gpu(bytes_by_class: dict[str, int], placement, experts: int) -> float:
    """What the engines hold per GPU, class by class (docs/memory.md#tensor-classes)."""
    p = placement
    return (
        bytes_by_class[ATTN_SHARDED] / p.attn_tp
        + bytes_by_class[ATTN_REPLICATED]
        + (bytes_by_class[DENSE_MLP] + bytes_by_class[SHARED_EXPERTS]) / p.dense_tp
        + bytes_by_class[ROUTED_EXPERTS] * p.experts_per_gpu / experts / p.moe_tp
        + bytes_by_class[ROUTER]
        + bytes_by_class[NORMS]
        + bytes_by_class[EMBEDDING] / p.vocab_tp
        + bytes_by_class[LM_HEAD] / p.lm_head_tp
    )


@pytest.mark.parametrize(
    "engine, layout, split",
    [
        ("vllm", "tp1", (1, 1, 1, 1)),  # (attention TP, dense TP, EP, MoE TP)
        ("vllm", "tp2", (2, 2, 1, 2)),
        ("vllm", "tp2 ep", (2, 2, 2, 1)),
        ("vllm", "dp2 ep", (1, 1, 2, 1)),
        ("sglang", "tp2", (2, 2, 1, 2)),
        ("sglang", "tp2 ep2", (2, 2, 2, 1)),
        ("sglang", "tp2 dp2 dpa ep2", (1, 2, 2, 1)),
    ],
)
def test_weights_per_gpu_are_the_tensor_bytes_split_by_class(acme, engine, layout, split):
    ckpt, folder = acme
    setup = Setup(load_model(str(folder)), hardware("h100", 2), get_engine(engine))
    verdict = plan_layout(setup, layout)
    p = verdict.placement
    assert (p.attn_tp, p.dense_tp, p.moe_ep, p.moe_tp) == split
    expected = expected_per_gpu(ckpt.class_bytes(), p, experts=8)
    assert verdict.memory.weights_gib * 2**30 == pytest.approx(expected, rel=1e-9)
    if layout == "tp1":
        assert expected == sum(ckpt.class_bytes().values())


def test_a_config_without_moe_keys_counts_experts_from_the_names(tmp_path):
    config = {k: v for k, v in ACME_CONFIG.items() if k not in ("n_routed_experts", "num_experts_per_tok")}
    config["model_type"] = "acme_moe_lite"
    del config["head_dim"]
    model = load_model(str(acme_checkpoint(experts=6).save(tmp_path / "lite", config)))
    assert model.moe.experts == 6 and model.moe.experts_per_token == 6
    assert any("top-6 routing assumed" in note for note in model.notes)
    assert model.head_dim == 32  # from k_norm's width, not hidden / heads


def test_fused_experts_and_packed_4bit_weights(tmp_path):
    """gpt-oss style: experts fused in 3-D tensors, MXFP4 blocks (two values a byte) with scales."""
    ckpt = Checkpoint()
    h, width, experts = 128, 64, 4
    ckpt.add(EMBEDDING, "model.embed_tokens.weight", "BF16", 512, h)
    for i in range(2):
        p = f"model.layers.{i}."
        ckpt.add(NORMS, p + "input_layernorm.weight", "BF16", h)
        ckpt.add(ATTN_SHARDED, p + "self_attn.qkv_proj.weight", "BF16", 3 * h, h)
        ckpt.add(ATTN_SHARDED, p + "self_attn.o_proj.weight", "BF16", h, h)
        ckpt.add(ATTN_SHARDED, p + "self_attn.sinks", "BF16", 4)
        ckpt.add(ROUTER, p + "mlp.router.weight", "BF16", experts, h)
        ckpt.add(ROUTED_EXPERTS, p + "mlp.experts.gate_up_proj_blocks", "U8", experts, 2 * width, h // 32, 16)
        ckpt.add(ROUTED_EXPERTS, p + "mlp.experts.gate_up_proj_scales", "U8", experts, 2 * width, h // 32)
        ckpt.add(ROUTED_EXPERTS, p + "mlp.experts.down_proj_blocks", "U8", experts, h, width // 32, 16)
        ckpt.add(ROUTED_EXPERTS, p + "mlp.experts.down_proj_scales", "U8", experts, h, width // 32)
    config = {
        "model_type": "fused_moe",
        "hidden_size": h,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 512,
        "experts_per_token": 2,
        "tie_word_embeddings": True,
    }
    model = load_model(str(ckpt.save(tmp_path / "fused", config, shards=1)))
    assert model.moe.experts == experts and model.moe.experts_per_token == 2
    assert model.tied_embeddings and model.class_bytes(LM_HEAD) == 0
    assert model.params[ROUTED_EXPERTS] == 2 * experts * 3 * width * h  # unpacked values
    for cls, nbytes in ckpt.class_bytes().items():
        assert model.class_bytes(cls) == pytest.approx(nbytes, rel=1e-12), cls
    assert model.quant.bytes_per_param(ROUTED_EXPERTS) == pytest.approx(0.5 + 1 / 32)


def test_every_safetensors_file_is_read_without_an_index(tmp_path):
    ckpt = acme_checkpoint()
    folder = ckpt.save(tmp_path / "noindex", ACME_CONFIG, shards=3)
    (folder / "model.safetensors.index.json").unlink()
    assert len(read_checkpoint(folder)) == len(ckpt.tensors)
    assert read_checkpoint(tmp_path) is None  # no checkpoint here


def test_the_hf_cache_snapshot_is_read_where_the_config_came_from(tmp_path):
    cache = tmp_path / "hub" / "models--acme--Acme-MoE"
    acme_checkpoint().save(cache / "snapshots" / "abc123", ACME_CONFIG)
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("abc123")
    model = load_model("acme/Acme-MoE", {"HF_HUB_CACHE": str(tmp_path / "hub")})
    assert model.name == "acme/Acme-MoE" and model.moe.experts == 8


def test_an_unknown_model_type_without_a_checkpoint_says_what_to_do(tmp_path):
    folder = tmp_path / "Bare"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(ACME_CONFIG))
    with pytest.raises(CockpitError) as err:
        load_model(str(folder))
    text = str(err.value)
    assert "'acme_moe' is not a family cockpit knows" in text and "no *.safetensors" in text
    assert str(folder) in text and "\n" not in text
    with pytest.raises(CockpitError, match="point --model at the model's folder with its"):
        parse_config(ACME_CONFIG)


def test_a_quantization_cockpit_cannot_name_is_sized_from_the_tensors(tmp_path):
    config = {**ACME_CONFIG, "model_type": "llama", "quantization_config": {"quant_method": "awq"}}
    config["intermediate_size"] = 512
    ckpt = Checkpoint()
    ckpt.add(EMBEDDING, "model.embed_tokens.weight", "F16", 1024, 256)
    for i in range(4):
        ckpt.add(ATTN_SHARDED, f"model.layers.{i}.self_attn.q_proj.qweight", "I32", 256, 256 // 8)
        ckpt.add(ATTN_SHARDED, f"model.layers.{i}.self_attn.q_proj.scales", "F16", 2, 256)
        ckpt.add(ATTN_SHARDED, f"model.layers.{i}.self_attn.k_proj.qweight", "I32", 256, 64 // 8)
        ckpt.add(DENSE_MLP, f"model.layers.{i}.mlp.down_proj.qweight", "I32", 512, 256 // 8)
        ckpt.add(DENSE_MLP, f"model.layers.{i}.mlp.down_proj.qzeros", "I32", 4, 256 // 8)
    model = load_model(str(ckpt.save(tmp_path / "awq", config, shards=1)))
    assert model.quant.method == "int4" and model.moe is None and model.dense_layers == 4
    assert model.params[DENSE_MLP] == 4 * 512 * 256
    for cls, nbytes in ckpt.class_bytes().items():
        assert model.class_bytes(cls) == pytest.approx(nbytes, rel=1e-12), cls


# --- Headers that cannot be read: one line naming the file and what to do ---------------------


def header_file(path: Path, header: bytes, data: int = 0, length: int | None = None) -> Path:
    path.write_bytes((len(header) if length is None else length).to_bytes(8, "little") + header + bytes(data))
    return path


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x01\x02\x03", "too short to be a safetensors file"),
        (None, "announce"),  # a header length of a terabyte: refused before anything is read
        (b"[1, 2]   ", "not a JSON object"),
        (b"{garbage", "not valid JSON"),
        (b'{"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}', "cut short"),
        (b'{"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}', "damaged"),
        (b'{"w": {"dtype": "BF16", "shape": [-4], "data_offsets": [0, 8]}}', "not whole sizes"),
        (b'{"w": {"dtype": "BF16", "shape": [4], "data_offsets": [8, 0]}}', "data_offsets"),
        (b'{"w": [1, 2]}', "no dtype/shape/offsets"),
    ],
)
def test_a_malformed_header_is_one_line(tmp_path, content, message):
    path = tmp_path / "model.safetensors"
    if content is None:
        header_file(path, b"{}", length=2**40)
    elif len(content) < 8:
        path.write_bytes(content)
    else:
        header_file(path, content, data=6)
    with pytest.raises(CockpitError, match=message) as err:
        read_header(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_header_longer_than_safetensors_allows_is_refused(tmp_path):
    path = header_file(tmp_path / "big.safetensors", b"{}", length=MAX_HEADER_BYTES + 1)
    with open(path, "ab") as file:
        file.truncate(MAX_HEADER_BYTES + 100)
    with pytest.raises(CockpitError, match="announce a 100,000,001-byte header"):
        read_header(path)


def test_a_missing_shard_is_a_download_to_finish(tmp_path):
    folder = acme_checkpoint().save(tmp_path / "partial", ACME_CONFIG)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CockpitError, match="lacks 1 of the 2 shards.*finish downloading"):
        load_model(str(folder))


def test_a_dtype_safetensors_adds_later_is_taken_at_its_offsets(tmp_path):
    path = header_file(
        tmp_path / "x.safetensors", b'{"w": {"dtype": "F2_NEW", "shape": [8], "data_offsets": [0, 2]}}', 2
    )
    (tensor,) = read_header(path)
    assert tensor.nbytes == 2 and tensor.shape == (8,)


# --- Known families: the config's numbers and the tensors' agree ------------------------------


def qwen3_next_checkpoint(cfg: dict) -> Checkpoint:
    """Tensors named and shaped as in Qwen/Qwen3-Next-80B-A3B-Instruct's checkpoint (the names
    vLLM's Qwen3NextModel.load_weights maps; mtp.* it skips)."""
    ckpt = Checkpoint()
    h, hd, heads, kv = (
        cfg["hidden_size"],
        cfg["head_dim"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
    )
    kh, vh = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    kd, vd = kh * cfg["linear_key_head_dim"], vh * cfg["linear_value_head_dim"]
    experts, width, shared = (
        cfg["num_experts"],
        cfg["moe_intermediate_size"],
        cfg["shared_expert_intermediate_size"],
    )
    ckpt.add(EMBEDDING, "model.embed_tokens.weight", "BF16", cfg["vocab_size"], h)
    ckpt.add(LM_HEAD, "lm_head.weight", "BF16", cfg["vocab_size"], h)
    ckpt.add(NORMS, "model.norm.weight", "BF16", h)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        ckpt.add(NORMS, p + "input_layernorm.weight", "BF16", h)
        ckpt.add(NORMS, p + "post_attention_layernorm.weight", "BF16", h)
        if (i + 1) % cfg["full_attention_interval"]:
            a = p + "linear_attn."
            ckpt.add(ATTN_SHARDED, a + "in_proj_qkvz.weight", "BF16", 2 * kd + 2 * vd, h)
            ckpt.add(ATTN_SHARDED, a + "in_proj_ba.weight", "BF16", 2 * vh, h)
            ckpt.add(ATTN_SHARDED, a + "conv1d.weight", "BF16", 2 * kd + vd, 1, cfg["linear_conv_kernel_dim"])
            ckpt.add(ATTN_SHARDED, a + "dt_bias", "BF16", vh)
            ckpt.add(ATTN_SHARDED, a + "A_log", "BF16", vh)
            ckpt.add(NORMS, a + "norm.weight", "BF16", cfg["linear_value_head_dim"])
            ckpt.add(ATTN_SHARDED, a + "out_proj.weight", "BF16", h, vd)
        else:
            a = p + "self_attn."
            ckpt.add(ATTN_SHARDED, a + "q_proj.weight", "BF16", 2 * heads * hd, h)  # queries and their gate
            ckpt.add(ATTN_SHARDED, a + "k_proj.weight", "BF16", kv * hd, h)
            ckpt.add(ATTN_SHARDED, a + "v_proj.weight", "BF16", kv * hd, h)
            ckpt.add(ATTN_SHARDED, a + "o_proj.weight", "BF16", h, heads * hd)
            ckpt.add(NORMS, a + "q_norm.weight", "BF16", hd)
            ckpt.add(NORMS, a + "k_norm.weight", "BF16", hd)
        ckpt.add(ROUTER, p + "mlp.gate.weight", "BF16", experts, h)
        ckpt.add(ROUTER, p + "mlp.shared_expert_gate.weight", "BF16", 1, h)
        for proj in ("gate_proj", "up_proj", "down_proj"):
            down = proj == "down_proj"
            ckpt.add(
                SHARED_EXPERTS,
                p + f"mlp.shared_expert.{proj}.weight",
                "BF16",
                *((h, shared) if down else (shared, h)),
            )
            for e in range(experts):
                ckpt.add(
                    ROUTED_EXPERTS,
                    p + f"mlp.experts.{e}.{proj}.weight",
                    "BF16",
                    *((h, width) if down else (width, h)),
                )
    ckpt.add(SKIP, "mtp.fc.weight", "BF16", h, 2 * h)
    ckpt.add(SKIP, "mtp.layers.0.self_attn.q_proj.weight", "BF16", 2 * heads * hd, h)
    return ckpt


def small_qwen3_next() -> dict:
    config = json.loads((MODELS / "qwen3-next-80b-a3b-instruct.json").read_text())
    return {
        **config,
        "hidden_size": 64,
        "num_hidden_layers": 8,
        "num_experts": 6,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "vocab_size": 256,
        "head_dim": 16,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
    }


def test_qwen3_next_config_and_checkpoint_agree_class_by_class():
    config = small_qwen3_next()
    ckpt = qwen3_next_checkpoint(config)
    tensors = [
        CheckpointTensor(n, dtype, shape, tensor_bytes(dtype, shape))
        for n, (dtype, shape) in ckpt.tensors.items()
    ]
    from_config = parse_config(config)
    from_tensors = arch_from_checkpoint({**config, "model_type": "someone_elses"}, tensors, "<t>", "t")
    for cls, nbytes in ckpt.class_bytes().items():
        assert from_tensors.class_bytes(cls) == nbytes, cls
        assert from_config.class_bytes(cls) == nbytes, cls
    # The tensors alone find the linear-attention layers and their state.
    assert from_tensors.linear_attention == from_config.linear_attention
    assert from_tensors.kv_bytes_per_token(2) == from_config.kv_bytes_per_token(2)


# --- Qwen3-Next: hybrid attention planned, not refused ----------------------------------------


@pytest.fixture(scope="module")
def qwen3_next():
    return read_config(MODELS / "qwen3-next-80b-a3b-instruct.json")


def test_qwen3_next_is_a_family_with_linear_attention(qwen3_next):
    assert qwen3_next.family == "qwen3-next" and qwen3_next.moe.experts == 512
    assert qwen3_next.moe.experts_per_token == 10 and qwen3_next.moe.shared_intermediate == 512
    lin = qwen3_next.linear_attention
    assert lin.layers == 36 and qwen3_next.full_attention_layers() == 12  # every fourth layer
    assert qwen3_next.total_params / 1e9 == pytest.approx(79.7, rel=0.005)  # "80B-A3B"
    assert "12 of 48 layers full attention" in str(qwen3_next)


def test_qwen3_next_keeps_per_token_kv_only_in_its_full_attention_layers(qwen3_next):
    # 12 layers x (K + V) x 2 KV heads x 256 x 2 bytes; two KV heads split over TP 2, one per rank beyond.
    assert qwen3_next.kv_bytes_per_token(2, attn_tp=1) == 12 * 2 * 2 * 256 * 2
    assert qwen3_next.kv_bytes_per_token(2, attn_tp=4) == 12 * 2 * 1 * 256 * 2
    assert qwen3_next.kv_bytes_per_token(2, attn_tp=1, layers=24) == 6 * 2 * 2 * 256 * 2  # a PP stage


def test_qwen3_next_state_per_request_is_the_gated_deltanet_state(qwen3_next):
    # vLLM gated_delta_net_state_shape: conv (2 x 16 x 128 + 32 x 128) / TP x (4 - 1), recurrent
    # 32 / TP x 128 x 128, both in the model dtype (bf16) by default.
    conv, recurrent = (2 * 16 * 128 + 32 * 128) * 3, 32 * 128 * 128
    assert qwen3_next.state_bytes_per_request(1) == 36 * (conv + recurrent) * 2
    assert qwen3_next.state_bytes_per_request(2) == 36 * (conv + recurrent) * 2 / 2
    # SGLang: conv bf16, recurrent float32 (mamba2_state_dtype).
    assert qwen3_next.state_bytes_per_request(1, conv_bytes=2, ssm_bytes=4) == 36 * (conv * 2 + recurrent * 4)
    assert (
        qwen3_next.state_bytes_per_request(1) / qwen3_next.kv_bytes_per_token(2) > 1000
    )  # ~1,600 tokens' worth


def test_qwen3_next_plans_on_eight_h100s(qwen3_next):
    box = hardware("h100", 8)
    for engine, layout in (("vllm", "tp4"), ("vllm", "tp8"), ("sglang", "tp8"), ("sglang", "tp8 ep8")):
        verdict = plan_layout(Setup(qwen3_next, box, get_engine(engine)), layout)
        assert verdict.verdict != FAILS, (engine, layout, [str(r) for r in verdict.reasons])
        tp = verdict.placement.attn_tp
        assert verdict.memory.weights_gib * 2**30 == pytest.approx(qwen3_next.total_bytes / tp, rel=0.01)
        assert verdict.memory.kv_bytes_per_token == qwen3_next.kv_bytes_per_token(2, tp)


def test_other_models_keep_no_state(minimax, kimi):
    assert minimax.state_bytes_per_request(8) == 0 == kimi.state_bytes_per_request(8)
    assert minimax.full_attention_layers() == minimax.layers
