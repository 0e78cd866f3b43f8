#!/usr/bin/env python3
"""Builds the tiny reference models WriteScope's forward pass is checked against.

Run on the GPU machine (torch + transformers 5, offline); the computation itself runs on
the CPU in fp32, so the outputs do not depend on the GPU:

    python3 deploy/make_fixtures.py                # writes tests/fixtures/<arch>/
    python3 deploy/make_fixtures.py --arch mixtral --out /tmp/fixtures

For each of deepseek_v2, qwen3_moe and mixtral it writes tests/fixtures/<arch>/:

    config.json, model.safetensors   save_pretrained in bf16 (transformers' default layout:
                                     per-expert tensors, the checkpoints' own names)
    expected.json                    transformers' outputs, fp32 compute on the bf16 weights

and tests/fixtures/<arch>_fused/ (config.json + model.safetensors only) saved with
save_original_format=False: transformers 5's runtime layout with fused experts
(mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]), which the loader
must accept too. Each folder stays well under 2 MiB.

expected.json:
  {"arch", "model_class", "transformers_version", "torch_version", "seed",
   "reference": {  # what transformers' modules computed, for whoever debugs a mismatch
       "rope_inv_freq": [...], "rope_attention_scaling": float,
       "attention_softmax_scale": float},
   "prompts": [{
       "name": str,
       "token_ids": [int] (> 512 tokens: crosses two 256-token blocks),
       "prompt_logprobs": [null, lp_1, ...]   lp_i = log p(token_i | tokens_<i), natural log
       "prompt_top1_ids": [int], "prompt_top1_margins": [float]
                                               argmax and top1 - top2 logprob after each prefix
                                               (index i: the prediction after tokens_<=i)
       "greedy": {"token_ids": [16 ints], "logprobs": [...], "margins": [...]}
                                               greedy continuation (no EOS stop), each token's
                                               logprob and its top1 - top2 margin
   }],
   "debug": {"prompt": 0, "positions": [...], "hidden_states": [[[float]]]}
            # output_hidden_states of prompt 0 at a few positions: index 0 = embeddings,
            # index l = after decoder layer l (the last one after the final norm, as
            # transformers returns it)
  }

The random weights are re-initialized at "sensible" scales (linear ~ N(0, 1/fan_in),
embeddings ~ N(0, 1), norms ~ 1 + N(0, 0.1^2), lm_head ~ N(0, 4/H)) so that the output
distributions are peaked enough for greedy decoding to have clear margins.
"""

import argparse
import inspect
import json
import math
import os
import pathlib
import random
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
VOCAB = 512
PROMPT_LENGTHS = (600, 530)
GREEDY_TOKENS = 16
MAX_FOLDER_BYTES = 2 << 20


def rope_kwargs(config_cls, theta, scaling=None):
    """RoPE settings in whichever style this transformers' config class takes."""
    params = inspect.signature(config_cls.__init__).parameters
    if "rope_parameters" in params:
        rope = {"rope_type": "default", "rope_theta": theta}
        if scaling:
            rope = dict(scaling, rope_theta=theta)
        return {"rope_parameters": rope}
    kwargs = {"rope_theta": theta}
    if scaling:
        legacy = dict(scaling)
        legacy["type"] = legacy.pop("rope_type")
        kwargs["rope_scaling"] = legacy
    return kwargs


def construct(cls, **kwargs):
    """cls(**kwargs); when this version refuses an extra key, retries without the keys its
    __init__ does not name (the loader defaults those: moe_layer_freq 1, scoring softmax)."""
    try:
        return cls(**kwargs)
    except TypeError as error:
        params = inspect.signature(cls.__init__).parameters
        dropped = sorted(k for k in kwargs if k not in params)
        print(f"   {cls.__name__} refused {error}; retrying without {dropped}")
        return cls(**{k: v for k, v in kwargs.items() if k in params})


def make_config(arch):
    common = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, bos_token_id=1,
                  eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    if arch == "deepseek_v2":
        cls = transformers.DeepseekV2Config
        # DeepSeek-V2-Lite's structure: MLA without q LoRA, first layer dense, 2 shared
        # experts, softmax greedy top-k without renormalization, its exact YaRN settings.
        yarn = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707}
        return construct(cls, **common, num_hidden_layers=3, num_key_value_heads=4,
                   intermediate_size=128, moe_intermediate_size=32, n_shared_experts=2,
                   n_routed_experts=8, num_experts_per_tok=2, first_k_dense_replace=1,
                   moe_layer_freq=1, n_group=1, topk_group=1, topk_method="greedy",
                   scoring_func="softmax", norm_topk_prob=False, routed_scaling_factor=1.0,
                   kv_lora_rank=32, q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=8,
                   v_head_dim=16, max_position_embeddings=163840, rms_norm_eps=1e-6,
                   hidden_act="silu", attention_bias=False,
                   **rope_kwargs(cls, 10000.0, yarn))
    if arch == "qwen3_moe":
        cls = transformers.Qwen3MoeConfig
        return construct(cls, **common, num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                   intermediate_size=128, moe_intermediate_size=32, num_experts=8,
                   num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                   mlp_only_layers=[], max_position_embeddings=40960, rms_norm_eps=1e-6,
                   hidden_act="silu", attention_bias=False, use_sliding_window=False,
                   sliding_window=None, **rope_kwargs(cls, 1000000.0))
    if arch == "mixtral":
        cls = transformers.MixtralConfig
        return construct(cls, **common, num_hidden_layers=2, num_key_value_heads=2, head_dim=16,
                   intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                   max_position_embeddings=32768, rms_norm_eps=1e-5, hidden_act="silu",
                   sliding_window=None, router_jitter_noise=0.0,
                   **rope_kwargs(cls, 1000000.0))
    raise ValueError(arch)


MODEL_CLASSES = {
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
}


@torch.no_grad()
def reinit(model, seed):
    gen = torch.Generator().manual_seed(seed)
    hidden = model.config.hidden_size
    for name, p in sorted(model.named_parameters()):
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if p.ndim == 1:
            value = 1.0 + 0.1 * noise                  # RMSNorm weights
        elif "embed_tokens" in name:
            value = noise
        elif name.startswith("lm_head"):
            value = noise * (2.0 / math.sqrt(hidden))
        else:
            value = noise / math.sqrt(p.shape[-1])     # [.., out, in]: fan_in is last
        p.copy_(value.to(p.dtype))


def prompts(seed):
    rng = random.Random(seed)
    random_ids = [rng.randrange(3, VOCAB) for _ in range(PROMPT_LENGTHS[0])]
    # A repeating motif with noise: later blocks can attend back to earlier ones.
    motif = [rng.randrange(3, VOCAB) for _ in range(37)]
    periodic = [motif[i % len(motif)] if rng.random() < 0.85 else rng.randrange(3, VOCAB)
                for i in range(PROMPT_LENGTHS[1])]
    return [("random_600", random_ids), ("periodic_530", periodic)]


def f32(x):
    return float(f"{float(x):.9g}")


@torch.no_grad()
def record_prompt(model, name, ids):
    input_ids = torch.tensor([ids], dtype=torch.long)
    logits = model(input_ids=input_ids).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    top2 = torch.topk(logprobs, 2, dim=-1)
    prompt_logprobs = [None] + [f32(logprobs[i - 1, ids[i]]) for i in range(1, len(ids))]
    out = {
        "name": name,
        "token_ids": ids,
        "prompt_logprobs": prompt_logprobs,
        "prompt_top1_ids": [int(t) for t in top2.indices[:, 0]],
        "prompt_top1_margins": [f32(a - b) for a, b in zip(top2.values[:, 0], top2.values[:, 1])],
    }
    # Greedy continuation, recomputed from scratch each step (no KV-cache subtleties).
    seq = list(ids)
    greedy = {"token_ids": [], "logprobs": [], "margins": []}
    for _ in range(GREEDY_TOKENS):
        step = model(input_ids=torch.tensor([seq], dtype=torch.long)).logits[0, -1].float()
        lp = torch.log_softmax(step, dim=-1)
        values, indices = torch.topk(lp, 2)
        token = int(indices[0])
        greedy["token_ids"].append(token)
        greedy["logprobs"].append(f32(values[0]))
        greedy["margins"].append(f32(values[0] - values[1]))
        seq.append(token)
    out["greedy"] = greedy
    return out


@torch.no_grad()
def record_debug(model, ids):
    positions = [0, 1, 2, 255, 256, 257, len(ids) - 1]
    result = model(input_ids=torch.tensor([ids], dtype=torch.long), output_hidden_states=True)
    states = [[[f32(v) for v in h[0, p]] for p in positions] for h in result.hidden_states]
    return {"prompt": 0, "positions": positions, "hidden_states": states}


def reference_details(model):
    details = {}
    rotary = getattr(model.model, "rotary_emb", None)
    if rotary is not None:
        details["rope_inv_freq"] = [f32(v) for v in rotary.inv_freq.float()]
        details["rope_attention_scaling"] = f32(getattr(rotary, "attention_scaling", 1.0))
    attn = model.model.layers[0].self_attn
    if hasattr(attn, "scaling"):
        details["attention_softmax_scale"] = f32(attn.scaling)
    return details


def folder_bytes(path):
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def save(model, path, **kwargs):
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    model.save_pretrained(str(path), **kwargs)
    # Only what the loader reads.
    for f in path.iterdir():
        if f.name not in ("config.json", "model.safetensors"):
            f.unlink()


def build(arch, out_root, seed):
    print(f"== {arch}")
    torch.manual_seed(seed)
    config = make_config(arch)
    model_cls = getattr(transformers, MODEL_CLASSES[arch])
    model = model_cls(config)
    reinit(model, seed)
    model = model.to(torch.bfloat16).eval()

    folder = out_root / arch
    save(model, folder)
    save_params = inspect.signature(model.save_pretrained).parameters
    fused_folder = out_root / f"{arch}_fused"
    if "save_original_format" in save_params:
        save(model, fused_folder, save_original_format=False)
    else:
        print("   this transformers has no save_original_format: no fused fixture")

    # The reference: load the saved bf16 checkpoint, compute in fp32.
    try:
        reloaded = model_cls.from_pretrained(str(folder), dtype=torch.bfloat16,
                                             attn_implementation="eager", local_files_only=True)
    except TypeError:
        reloaded = model_cls.from_pretrained(str(folder), torch_dtype=torch.bfloat16,
                                             attn_implementation="eager", local_files_only=True)
    reloaded = reloaded.float().eval()
    for (n1, p1), (n2, p2) in zip(sorted(model.state_dict().items()),
                                  sorted(reloaded.state_dict().items())):
        assert n1 == n2 and torch.equal(p1.float(), p2), f"reload changed {n1}"

    expected = {
        "arch": arch,
        "model_class": MODEL_CLASSES[arch],
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seed": seed,
        "reference": reference_details(reloaded),
        "prompts": [record_prompt(reloaded, name, ids) for name, ids in prompts(seed)],
    }
    expected["debug"] = record_debug(reloaded, expected["prompts"][0]["token_ids"])
    with open(folder / "expected.json", "w") as f:
        json.dump(expected, f, separators=(",", ":"))

    from safetensors import safe_open
    for path in (folder, fused_folder):
        if not path.exists():
            continue
        with safe_open(str(path / "model.safetensors"), framework="pt") as f:
            names = sorted(f.keys())
        size = folder_bytes(path)
        print(f"   {path}: {len(names)} tensors, {size} bytes; e.g. "
              + ", ".join(n for n in names if ".experts." in n or "gate" in n)[:300])
        if size > MAX_FOLDER_BYTES:
            sys.exit(f"{path} is {size} bytes, over the {MAX_FOLDER_BYTES} budget")
    for p in expected["prompts"]:
        margins = p["greedy"]["margins"]
        print(f"   {p['name']}: greedy {p['greedy']['token_ids']} "
              f"min margin {min(margins):.4f}, mean prompt logprob "
              f"{sum(x for x in p['prompt_logprobs'][1:]) / (len(p['token_ids']) - 1):.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=sorted(MODEL_CLASSES), action="append",
                        help="architecture(s) to build (default: all three)")
    parser.add_argument("--out", default=str(REPO / "tests" / "fixtures"))
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    torch.use_deterministic_algorithms(True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    out_root = pathlib.Path(args.out)
    for arch in args.arch or sorted(MODEL_CLASSES):
        build(arch, out_root, args.seed)


if __name__ == "__main__":
    main()
