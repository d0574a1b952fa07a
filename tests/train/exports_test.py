"""What people do with a fine-tune next (issue 49, part 4), checked against the tools they do it
with: the merged model (`output.saveMerged`) against PEFT's merge_and_unload (and, for QLoRA,
against transformers' dequantized bitsandbytes base), and GGUF files written by llama.cpp's tools
(fetch/kubetune_fetch/export_gguf.py) scored by llama.cpp itself (llama-cpp-python) against the
merged model in transformers."""
import json
import math
import os
import sys
from pathlib import Path

import torch

import harness as h

SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests


def held_out_ids(tok, text):
    return tok(text)["input_ids"] + [tok.eos_token_id]


def hf_loss(model, ids) -> float:
    with torch.no_grad():
        t = torch.tensor([ids])
        return model(input_ids=t, labels=t).loss.item()


def train_lora(w: Path, model_dir: Path, texts, *, method="lora", steps=6, lr=2e-2, **model_fields):
    data = w / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    cfg = h.config(model_dir, data, w / "out", method=method, microBatchSize=4, maxSteps=steps,
                   learningRate=lr)
    cfg["data"].update(format="text", maxLength=128)
    cfg["model"].update(model_fields)
    cfg["method"]["lora"]["targetModules"] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                              "down_proj"]
    cfg["output"]["saveMerged"] = True
    return cfg


TEXTS = [f"record {i}: " + " ".join(["the quick brown fox jumps over the lazy dog"] * (1 + i % 3))
         for i in range(8)]
HELD_OUT = "record 9: the quick brown fox jumps over the lazy dog the quick brown fox"


def merged_lora_equals_peft_merge():
    """A bf16 base: the merged folder is bf16 (the base's dtype, what vLLM serves), its weights are
    PEFT's merge_and_unload of the same adapter rounded to bf16 (to one bf16 step: the product B·A
    may sum in another order), and transformers scores held-out text with it as PEFT scores the
    base with the adapter."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    w = h.workdir("merged-lora")
    model_dir = h.tiny_model(w / "model")
    AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).save_pretrained(model_dir)
    assert json.loads((model_dir / "config.json").read_text())["dtype"] == "bfloat16"
    cfg = train_lora(w, model_dir, TEXTS, dtype="float32")
    h.run(["train", "--config", h.write_config(w / "c.json", cfg)])
    merged_dir = w / "out" / "merged"
    config = json.loads((merged_dir / "config.json").read_text())
    assert config["dtype"] == "bfloat16", config
    ours = h.weights(merged_dir)
    assert all(t.dtype == torch.bfloat16 for t in ours.values()), {k: t.dtype for k, t in ours.items()}
    assert not any("lora" in k for k in ours), list(ours)[:5]
    assert (merged_dir / "tokenizer.json").is_file()

    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                                     w / "out").merge_and_unload()
    reference = w / "peft-merged"
    peft.to(torch.bfloat16).save_pretrained(reference)
    theirs = h.weights(reference)
    assert ours.keys() == theirs.keys(), sorted(ours.keys() ^ theirs.keys())
    for k in ours:
        a, b = ours[k].float(), theirs[k].float()
        step = b.abs().clamp_min(1e-30) * 2.0 ** -7  # one bf16 step at b's magnitude
        assert ((a - b).abs() <= step).all(), (k, (a - b).abs().max().item())
    base = h.weights(model_dir)
    changed = max((ours[k].float() - base[k].float()).abs().max().item() for k in ours)
    assert changed > 1e-3, f"the merge changed no weight ({changed})"

    tok = AutoTokenizer.from_pretrained(model_dir)
    ids = held_out_ids(tok, HELD_OUT)
    with_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                                             w / "out")
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32)
    plain = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    l_adapter, l_merged, l_base = hf_loss(with_adapter, ids), hf_loss(merged, ids), hf_loss(plain, ids)
    print(f"held-out loss: base {l_base:.5f}, base + adapter (peft) {l_adapter:.5f}, merged {l_merged:.5f}")
    assert abs(l_base - l_adapter) > 0.05, "the adapter changed nothing to compare"
    assert math.isclose(l_merged, l_adapter, rel_tol=5e-3), (l_merged, l_adapter)


def qlora_merged_into_the_dequantized_base():
    """QLoRA's adapters learned against the 4-bit base, so the merged model is that base
    dequantized plus the adapters (Unsloth's save_pretrained_merged), not the original weights plus
    the adapters: equal to transformers' own dequantize() of the bitsandbytes base with PEFT's
    merge_and_unload, and farther from a merge into the original weights than the rounding is."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    w = h.workdir("merged-qlora")
    model_dir = h.tiny_model(w / "model")
    cfg = train_lora(w, model_dir, TEXTS, method="qlora", dtype="float32")
    cfg["method"]["quantization"] = {"type": "nf4", "doubleQuant": True, "blockSize": 64,
                                     "computeDtype": "float32"}
    h.run(["train", "--config", h.write_config(w / "c.json", cfg)])
    ours = h.weights(w / "out" / "merged")

    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=torch.float32)
    quantized = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=bnb, device_map="cpu",
                                                     dtype=torch.float32)
    reference = PeftModel.from_pretrained(quantized.dequantize(), w / "out").merge_and_unload()
    reference.save_pretrained(w / "reference")
    theirs = h.weights(w / "reference")
    original = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                                         w / "out").merge_and_unload()
    original.save_pretrained(w / "original")
    unquantized = h.weights(w / "original")
    to_reference = h.max_abs_diff(ours, theirs)
    to_original = h.max_abs_diff(ours, unquantized)
    print(f"merged: {to_reference:.2e} from transformers' dequantized base + PEFT, "
          f"{to_original:.2e} from the original base + PEFT")
    assert to_reference < 1e-6, to_reference
    assert to_original > 1e-3, to_original


def llama_cpp_home() -> Path:
    import llama_cpp

    default = Path.home() / ".cache" / "kubetune" / f"llama.cpp-{llama_cpp.__version__}"
    return Path(os.environ.get("KUBETUNE_LLAMA_CPP", default))


def qwen2_with_a_real_tokenizer(dest: Path) -> Path:
    """A tiny Qwen2 made by transformers, with Qwen2's published tokenizer as llama.cpp ships it
    (models/ggml-vocab-qwen2.gguf, read back by transformers): llama.cpp's converter refuses a
    tokenizer it does not recognise, as it should. Dimensions of 256 so that k-quants (blocks of
    256) apply to every matrix; a wide initialisation so that predictions are sharp and a wrong
    weight shows in the loss."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    vocab = llama_cpp_home() / "models"
    tok = AutoTokenizer.from_pretrained(vocab, gguf_file="ggml-vocab-qwen2.gguf")
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, initializer_range=0.1, eos_token_id=tok.eos_token_id,
                         bos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest


def llama_cpp_loss(gguf: Path, ids) -> float:
    """Mean next-token loss of `ids` under llama.cpp's forward of the GGUF file."""
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_ctx=512, logits_all=True, verbose=False, n_threads=2)
    llm.eval(ids)
    logits = np.asarray(llm.scores[: len(ids)], dtype=np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-np.mean([logp[i, ids[i + 1]] for i in range(len(ids) - 1)]))


# A GGUF type's distance from the merged model on held-out text, in loss: 16 bits round as bf16
# already did (nothing), 8 bits lose about 0.4% of a weight, 4-bit k-quants several percent.
GGUF_TOLERANCE = {"f16": 0.005, "q8_0": 0.02, "q4_k_m": 0.25}


def gguf_scores_as_the_merged_model():
    """A LoRA fine-tune of a tiny Qwen2 (with Qwen2's real tokenizer) merged and exported to GGUF
    f16, q8_0 and q4_k_m by llama.cpp's converter and quantizer; llama.cpp loads each file,
    tokenizes held-out text as transformers does, and its loss on that text is the merged model's
    (in transformers) within what each quantization is expected to lose, while the base model's
    loss is farther away than every tolerance (the adapter is in the files)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("SKIPPED: llama-cpp-python is not installed (scripts/setup.sh --test installs it)")
        sys.exit(SKIP)
    if not (llama_cpp_home() / "convert_hf_to_gguf.py").is_file():
        print(f"SKIPPED: no llama.cpp converter at {llama_cpp_home()} (scripts/setup.sh --test unpacks it)")
        sys.exit(SKIP)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(h.REPO / "fetch"))
    os.environ["KUBETUNE_LLAMA_CPP"] = str(llama_cpp_home())
    from kubetune_fetch import export_gguf

    w = h.workdir("gguf")
    model_dir = qwen2_with_a_real_tokenizer(w / "model")
    cfg = train_lora(w, model_dir, TEXTS, steps=8, lr=3e-2, dtype="float32")
    h.run(["train", "--config", h.write_config(w / "c.json", cfg)], timeout=600)
    merged_dir = w / "out" / "merged"
    files = export_gguf.export(merged_dir, w / "gguf", list(GGUF_TOLERANCE))
    assert [f.name for f in files] == [f"model-{k}.gguf" for k in GGUF_TOLERANCE], files
    assert not list((w / "gguf").glob("*.partial")) and not list((w / "gguf").glob(".gguf-*"))

    tok = AutoTokenizer.from_pretrained(merged_dir)
    ids = held_out_ids(tok, HELD_OUT)[:-1]
    from llama_cpp import Llama
    vocab_only = Llama(model_path=str(files[0]), vocab_only=True, verbose=False)
    assert vocab_only.tokenize(HELD_OUT.encode(), add_bos=False, special=False) == ids, "tokenizers differ"

    merged = hf_loss(AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32), ids)
    base = hf_loss(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), ids)
    print(f"held-out loss in transformers: merged {merged:.4f}, base {base:.4f}")
    assert abs(base - merged) > 5 * max(GGUF_TOLERANCE.values()), "the adapter changed too little to tell"
    for f, (kind, tolerance) in zip(files, GGUF_TOLERANCE.items()):
        loss = llama_cpp_loss(f, ids)
        print(f"llama.cpp {kind}: {loss:.4f} ({loss - merged:+.4f} from the merged model, tolerance {tolerance})")
        assert abs(loss - merged) <= tolerance, (kind, loss, merged)

    # An unknown type is refused by name, before anything is written.
    try:
        export_gguf.export(merged_dir, w / "bad", ["q3_x"])
        raise AssertionError("q3_x was accepted")
    except export_gguf.ExportError as e:
        assert "q3_x" in str(e), e
    assert not (w / "bad").exists()


if __name__ == "__main__":
    h.main({f.__name__: f for f in (merged_lora_equals_peft_merge, qlora_merged_into_the_dequantized_base,
                                    gguf_scores_as_the_merged_model)})
