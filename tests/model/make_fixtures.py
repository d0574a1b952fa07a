"""Reference fixtures for the model/io tests, produced with transformers and peft.

Usage: make_fixtures.py OUT_DIR

For each tiny random model family this writes OUT_DIR/<name>/ (a save_pretrained folder) and
OUT_DIR/<name>_ref.safetensors with:
  input_ids, position_ids, labels [2,T]      inputs (labels hold -100 runs)
  logits [2,T,V], loss (HF mean)             fp32 reference outputs
  grad.<param name>                          gradients of a full fine-tune (HF names)
  packed_input_ids/position_ids/segment_ids  two examples + padding packed in one row
  packed_logits_0, packed_logits_1           transformers run on each example separately
LoRA fixtures (peft, r=4, alpha=8, all linear layers, random non-zero lora_B):
  OUT_DIR/<name>_lora/ (save_pretrained adapter) and OUT_DIR/<name>_lora_ref.safetensors with
  logits, loss and grad.<our lora param name>.
"""
import copy
import json
import os
import sys

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, Gemma3Config, Gemma3ForCausalLM,
                          Gemma3ForConditionalGeneration, Gemma3TextConfig, GptOssConfig,
                          GptOssForCausalLM, SiglipVisionConfig, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, MixtralConfig,
                          MixtralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

VOCAB = 300
T = 17
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def families():
    """name -> (model class, config, save options)."""
    llama3_rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
                   "rope_theta": 500000.0}
    return {
        # Llama 3.2: llama3 RoPE scaling (all three frequency bands hit), tied embeddings.
        "llama32": (LlamaForCausalLM, LlamaConfig(**{**COMMON, "num_hidden_layers": 3},
                    rope_parameters=llama3_rope, tie_word_embeddings=True), {}),
        # Llama 2: plain RoPE, untied.
        "llama2": (LlamaForCausalLM, LlamaConfig(**COMMON, tie_word_embeddings=False), {}),
        # Llama flags: attention/mlp bias, explicit head_dim != hidden/heads, linear RoPE; sharded.
        "llama_bias": (LlamaForCausalLM, LlamaConfig(**COMMON, attention_bias=True, mlp_bias=True,
                       head_dim=32, rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                     "rope_theta": 10000.0}),
                       {"max_shard_size": "60KB"}),
        # Dynamic NTK RoPE with a sequence longer than max_position_embeddings.
        "llama_dynamic": (LlamaForCausalLM, LlamaConfig(**{**COMMON, "max_position_embeddings": 12},
                          rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                           "rope_theta": 10000.0}), {}),
        # Qwen2: q/k/v bias (no o bias), tied, large theta.
        "qwen2": (Qwen2ForCausalLM, Qwen2Config(**COMMON, tie_word_embeddings=True,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), {}),
        # Mistral: sliding window shorter than the sequence.
        "mistral": (MistralForCausalLM, MistralConfig(**COMMON, sliding_window=8), {}),
        # SmolLM-like: tied, one KV head (multi-query), 3 layers.
        "smollm": (LlamaForCausalLM, LlamaConfig(**{**COMMON, "num_key_value_heads": 1,
                   "num_hidden_layers": 3}, tie_word_embeddings=True), {}),
        # Saved in bf16: the C++ side loads it into fp32.
        "llama_bf16": (LlamaForCausalLM, LlamaConfig(**COMMON), {"dtype": torch.bfloat16}),
        # Qwen3: q/k norms, head_dim (24) != hidden/heads (16), untied, the second layer sliding.
        "qwen3": (Qwen3ForCausalLM, Qwen3Config(**COMMON, head_dim=24, tie_word_embeddings=False,
                  use_sliding_window=True, sliding_window=8, max_window_layers=1,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), {}),
        # Gemma 3 (text): (1 + w) norms around both halves, q/k norms, GeGLU, scaled embeddings,
        # query_pre_attn_scalar != head_dim, sliding and global layers with their own RoPE (the
        # global one linearly scaled, as in 4B-27B), tied; sharded.
        "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig(
                   **{**COMMON, "num_hidden_layers": 3, "hidden_size": 48}, head_dim=32,
                   query_pre_attn_scalar=24, sliding_window=8,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                    "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                       "rope_theta": 1000000.0}}),
                   {"max_shard_size": "60KB"}),
        # Phi-3.5 / Phi-4-mini: fused qkv_proj and gate_up_proj, LongRoPE past 16 positions (the
        # 17-token case takes the long factors, the packed examples the short ones), partial
        # rotary (0.75), a sliding window.
        "phi3": (Phi3ForCausalLM, Phi3Config(**{**COMMON, "max_position_embeddings": 64},
                 original_max_position_embeddings=16, sliding_window=12,
                 rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                  "partial_rotary_factor": 0.75,
                                  "short_factor": [1.0 + 0.1 * i for i in range(6)],
                                  "long_factor": [2.0 + 0.3 * i for i in range(6)]}), {}),
        # Phi-4 (14B's layout): fused projections, plain RoPE, no window, untied.
        "phi4": (Phi3ForCausalLM, Phi3Config(**COMMON, rope_parameters={"rope_type": "default",
                                                                         "rope_theta": 250000.0}), {}),
        # Qwen3-MoE: 6 experts, top 2 renormalised, the middle layer dense (mlp_only_layers), the
        # router's load-balancing loss in the loss (output_router_logits); sharded. With 34 tokens
        # some expert of some layer gets none.
        "qwen3_moe": (Qwen3MoeForCausalLM, Qwen3MoeConfig(
                      **{**COMMON, "num_hidden_layers": 3}, moe_intermediate_size=24,
                      num_experts=6, num_experts_per_tok=2, norm_topk_prob=True,
                      mlp_only_layers=[1], output_router_logits=True, router_aux_loss_coef=0.05,
                      tie_word_embeddings=False), {"max_shard_size": "60KB"}),
        # Mixtral: 4 experts stored as block_sparse_moe.experts.N.w1/w2/w3, top 2, a window.
        "mixtral": (MixtralForCausalLM, MixtralConfig(**COMMON, num_local_experts=4,
                    num_experts_per_tok=2, sliding_window=8), {}),
        # Gemma 3 4B-27B as published: Gemma3ForConditionalGeneration, the language model (the
        # gemma3 fixture's options) in text_config and stored under language_model.*, beside a
        # SigLIP vision tower and its projector that kubetune carries untouched.
        "gemma3_mm": (Gemma3ForConditionalGeneration, Gemma3Config(
                      text_config=Gemma3TextConfig(
                          **{**COMMON, "hidden_size": 48}, head_dim=32, query_pre_attn_scalar=24,
                          sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                          rope_parameters={
                              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                              "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                 "rope_theta": 1000000.0}}).to_dict(),
                      vision_config=SiglipVisionConfig(hidden_size=32, intermediate_size=64,
                                                       num_hidden_layers=1, num_attention_heads=2,
                                                       image_size=28, patch_size=14).to_dict(),
                      mm_tokens_per_image=4, boi_token_index=297, eoi_token_index=298,
                      image_token_index=299), {"max_shard_size": "60KB"}),
        # gpt-oss: sinks, biases everywhere, sliding and full layers in turn, YaRN RoPE (not
        # truncated, as gpt-oss ships it); 4 experts of width 32 (MXFP4's block) with biases, top 2 by logit, the
        # clamped SwiGLU with a limit low enough to clamp some values, stored whole and
        # transposed; the load-balancing loss in the loss.
        "gpt_oss": (GptOssForCausalLM, GptOssConfig(
                    **{**COMMON, "intermediate_size": 32}, head_dim=16, num_local_experts=4,
                    num_experts_per_tok=2, sliding_window=8, swiglu_limit=1.0,
                    output_router_logits=True, router_aux_loss_coef=0.05,
                    rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                                     "beta_slow": 1.0, "truncate": False,
                                     "original_max_position_embeddings": 64,
                                     "rope_theta": 10000.0}), {}),
    }


# Families with a PEFT LoRA fixture (all linear layers: Phi-3's fused qkv_proj and gate_up_proj
# as PEFT names them).
LORA_FAMILIES = {"llama32": 11, "qwen2": 12, "qwen3": 13, "gemma3": 14, "phi3": 15,
                 "qwen3_moe": 16, "mixtral": 17, "gpt_oss": 18, "gemma3_mm": 19}

# A mixture of experts' stacks are adapted through PEFT's target_parameters ("all-linear" leaves
# them out).
EXPERT_STACKS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]


def randomize(model, seed):
    """Weights big enough that every term matters (HF's 0.02 init makes logits nearly flat)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.1 * noise if "norm" in name else 0.08 * noise)


def make_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (2, T), generator=g)
    labels = ids.clone()
    labels[0, :5] = -100       # a masked prompt
    labels[1, 8:11] = -100     # a masked run in the middle
    labels[1, -1] = -100
    pos = torch.arange(T).unsqueeze(0).expand(2, T).contiguous()
    return ids, pos, labels


def packed_case(model, seed):
    """Two examples (6 and 10 tokens) + 1 padding token in one row, and HF run on each alone."""
    g = torch.Generator().manual_seed(seed + 1)
    a = torch.randint(3, VOCAB, (1, 6), generator=g)
    b = torch.randint(3, VOCAB, (1, 10), generator=g)
    ids = torch.cat([a, b, torch.zeros(1, 1, dtype=torch.long)], 1)
    pos = torch.cat([torch.arange(6), torch.arange(10), torch.zeros(1, dtype=torch.long)]).unsqueeze(0)
    seg = torch.tensor([[1] * 6 + [2] * 10 + [0]])
    with torch.no_grad():
        la = model(input_ids=a).logits.float()
        lb = model(input_ids=b).logits.float()
    return {"packed_input_ids": ids, "packed_position_ids": pos, "packed_segment_ids": seg,
            "packed_logits_0": la[0], "packed_logits_1": lb[0]}


def reference(model, ids, pos, labels):
    model.zero_grad()
    out = model(input_ids=ids, position_ids=pos, labels=labels)
    out.loss.backward()
    ref = {"input_ids": ids, "position_ids": pos, "labels": labels,
           "logits": out.logits.detach().float().contiguous(), "loss": out.loss.detach().float()}
    return ref


def our_param_name(model, name):
    """Ours for a transformers parameter name; None for a multimodal model's parts kubetune does
    not train (the vision tower, the projector): its language model is model.language_model."""
    if not hasattr(model.config, "text_config"):
        return name
    if name.startswith("model.language_model."):
        return "model." + name.removeprefix("model.language_model.")
    return name if name.startswith("lm_head.") else None


def full_finetune_fixture(out_dir, name, cls, config, save_opts, seed):
    torch.manual_seed(seed)
    model = cls(config).float()
    randomize(model, seed)
    folder = os.path.join(out_dir, name)
    dtype = save_opts.get("dtype")
    if dtype is not None:
        model.to(dtype).save_pretrained(folder)
        # The reference is the bf16 checkpoint evaluated in fp32, which is what we load.
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    else:
        kw = {"max_shard_size": save_opts["max_shard_size"]} if "max_shard_size" in save_opts else {}
        model.save_pretrained(folder, **kw)
    model.train()
    ids, pos, labels = make_inputs(seed)
    ref = reference(model, ids, pos, labels)
    for pname, p in model.named_parameters():
        if our_param_name(model, pname) is not None:
            ref["grad." + our_param_name(model, pname)] = p.grad.detach().float().contiguous()
    model.eval()
    ref.update(packed_case(model, seed))
    save_file({k: v.contiguous() for k, v in ref.items()}, os.path.join(out_dir, name + "_ref.safetensors"))
    return model


def our_lora_name(peft_name):
    # base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight
    #   -> model.layers.0.self_attn.q_proj.lora_A.weight
    # With both expert stacks adapted PEFT wraps the experts module twice, down_proj outermost:
    #   ...mlp.experts.base_layer.lora_A.default.weight -> ...mlp.experts.gate_up_lora.lora_A.weight
    #   ...mlp.experts.lora_A.default.weight            -> ...mlp.experts.down_lora.lora_A.weight
    name = peft_name.removeprefix("base_model.model.").replace(".default.", ".")
    name = name.replace("model.language_model.", "model.")  # a multimodal model's language model
    name = name.replace(".experts.base_layer.lora_", ".experts.gate_up_lora.lora_")
    return name.replace(".experts.lora_", ".experts.down_lora.lora_")


def lora_fixture(out_dir, name, model, seed):
    torch.manual_seed(seed)
    moe = hasattr(model.config, "num_experts_per_tok")
    if name == "qwen3_moe":
        # The Unsloth/TRL habit: per-expert names, which peft maps onto the fused stacks
        # (gate_proj + up_proj -> experts.gate_up_proj with twice the rank and alpha, in
        # rank_pattern and alpha_pattern); the dense layer's MLP is then left alone.
        targets, parameters = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                               "down_proj"], None
    elif hasattr(model.config, "text_config"):  # the language model's layers, not the vision tower's
        targets, parameters = (r"model\.language_model\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj"
                               r"|down_proj)"), None
    elif moe:  # PEFT's all-linear would adapt the router too; kubetune keeps it frozen
        targets, parameters = ["q_proj", "k_proj", "v_proj", "o_proj"], EXPERT_STACKS
    else:
        targets, parameters = "all-linear", None
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets,
                     target_parameters=parameters, task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, cfg)
    if moe:  # the layout our_lora_name assumes: gate_up_proj's factors under base_layer
        shapes = {n: tuple(p.shape) for n, p in peft_model.named_parameters() if "lora_" in n}
        inner = "base_model.model.model.layers.0.mlp.experts.base_layer.lora_B.default.weight"
        width = (model.config.moe_intermediate_size if model.config.model_type == "qwen3_moe"
                 else model.config.intermediate_size)
        assert shapes[inner][0] == 2 * width, shapes
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if "lora_B" in pname:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    peft_model.save_pretrained(os.path.join(out_dir, name + "_lora"))
    peft_model.train()
    ids, pos, labels = make_inputs(seed + 3)
    ref = reference(peft_model, ids, pos, labels)
    n = 0
    for pname, p in peft_model.named_parameters():
        if p.requires_grad:
            ref["grad." + our_lora_name(pname)] = p.grad.detach().float().contiguous()
            n += 1
    assert n > 0
    save_file(ref, os.path.join(out_dir, name + "_lora_ref.safetensors"))


FP4_CODES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def quantize_mxfp4(w):
    """[..., N] (N a multiple of 32) as OCP MXFP4: blocks [..., N/32, 16] uint8 (two E2M1 codes
    a byte, low nibble first) and scales [..., N/32] uint8 (2^(s-127) per 32 values), each value
    the nearest code of its block scaled so its largest fits 6."""
    groups = w.float().reshape(*w.shape[:-1], -1, 32)
    amax = groups.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    exponent = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    scaled = groups / torch.exp2(exponent)
    index = (scaled.abs().unsqueeze(-1) - FP4_CODES).abs().argmin(-1)
    codes = (index + 8 * (scaled < 0)).to(torch.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks.contiguous(), (exponent.squeeze(-1) + 127).to(torch.uint8).contiguous()


def mxfp4_fixture(out_dir, model):
    """gpt-oss as OpenAI publishes it: the experts' stacks as NAME_blocks and NAME_scales in the
    [E, out, in] orientation, quantization_config mxfp4; and the logits of the model whose
    experts are what transformers' convert_moe_packed_tensors makes of them."""
    from safetensors.torch import load_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    folder = os.path.join(out_dir, "gpt_oss_mxfp4")
    os.makedirs(folder, exist_ok=True)
    tensors = load_file(os.path.join(out_dir, "gpt_oss", "model.safetensors"))
    stored = {}
    for name, value in tensors.items():
        if not name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            stored[name] = value
            continue
        blocks, scales = quantize_mxfp4(value.transpose(1, 2))  # [E, out, in]
        stored[name + "_blocks"], stored[name + "_scales"] = blocks, scales
        whole = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
        module, param = name.rsplit(".", 1)
        getattr(model.get_submodule(module), param).data.copy_(whole)
    save_file(stored, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(out_dir, "gpt_oss", "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4",
                                     "modules_to_not_convert": ["model.layers.*.self_attn",
                                                                "model.layers.*.mlp.router",
                                                                "model.embed_tokens", "lm_head"]}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    model.eval()
    ids, pos, _ = make_inputs(200)
    with torch.no_grad():
        logits = model(input_ids=ids, position_ids=pos).logits.float()
    save_file({"input_ids": ids, "position_ids": pos, "logits": logits.contiguous()},
              os.path.join(out_dir, "gpt_oss_mxfp4_ref.safetensors"))


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(2)
    models = {}
    for i, (name, (cls, config, save_opts)) in enumerate(families().items()):
        models[name] = full_finetune_fixture(out_dir, name, cls, config, save_opts, seed=100 + i)
    mxfp4_fixture(out_dir, copy.deepcopy(models["gpt_oss"]))
    for name, seed in LORA_FAMILIES.items():
        lora_fixture(out_dir, name, models[name], seed=seed)
    with open(os.path.join(out_dir, "fixtures.json"), "w") as f:
        json.dump({"families": list(families().keys()), "lora": list(LORA_FAMILIES)}, f)
    print("wrote fixtures to", out_dir)


if __name__ == "__main__":
    main()
