#!/usr/bin/env python3
"""Reference fixtures for text/ (kubetune_text).

Trains small BPE tokenizers with the `tokenizers` library that replicate the tokenizer.json layout
of real model families (Llama 3, Qwen2, Qwen3, GPT-2/SmolLM, Llama-2/Mistral and Gemma 3
SentencePiece-BPE, Phi-4), saves them with transformers next to the families' real chat templates,
and records what HF produces: ids (with and without special tokens), byte offsets, decoded text and
chat renderings. Jinja feature cases are rendered through transformers' own template environment.

Usage: make_fixtures.py OUT_DIR      (writes OUT_DIR/<name>/... and OUT_DIR/jinja_cases.json)
"""
import json
import os
import shutil
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import _compile_jinja_template

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_templates as T  # noqa: E402  (the families' real chat template strings)

# Split patterns from the real tokenizer.json files.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# tiktoken's o200k (gpt-oss's o200k_harmony): upper- and lower-case runs apart, contractions inside.
O200K_PATTERN = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"])
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's what we'll do; they're sure I'm right.",
    "Tokenizers split text into pieces: words, sub-words and bytes. Byte-level BPE never fails.",
    "def encode(text, add_special_tokens=False):\n\tids = []\n\tfor piece in split(text):\n\t\tids += bpe(piece)\n\treturn ids\n",
    "Numbers like 1234567890, 3.14159 and 1,000,000 appear in many documents from 2023 and 2024.",
    "Café, naïve, résumé, façade, jalapeño, Zürich, São Paulo, Kraków, Ærøskøbing.",
    "中文分词测试：你好，世界！机器学习和自然语言处理。",
    "日本語のテキストも少し含めます。東京は大きな都市です。",
    "한국어 텍스트도 포함합니다. 안녕하세요.",
    "Emoji 😀 😃 👍 🎉 and flags 🇫🇷 appear in chats.",
    "System prompts tell the assistant how to behave. The user asks; the assistant answers.",
    "    indented code block\n        deeper\n\n\n   spaces   everywhere   ",
    "Windows line endings\r\nare common\r\nin logs.",
    "SHOUTING WORDS AND MiXeD CaSe, plus snake_case and camelCase identifiers.",
    "Mathematics: x^2 + y^2 = z^2, ∑ ∫ √ ≤ ≥ ≠ ∞ π.",
    "Kubernetes runs training jobs; the operator schedules pods on GPU nodes with NCCL.",
] * 8

TEXTS = [
    "Hello world!",
    "",
    " ",
    "   ",
    "  leading spaces and trailing spaces   ",
    "tabs\tand\ttabs\t",
    "line1\nline2\r\nline3\n\n\nline6\n",
    "def foo(x):\n\treturn x  *  2\n\n\n    pass",
    "Numbers: 1234567890 3.14159 1,000,000 and 42.",
    "It's we'll they'RE I'M you'D SHE'S 'LL",
    "Café naïve résumé",
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301",
    "a\u0323\u0307b \u1e0b\u0323 \ufb01x \u00c5ngstr\u00f6m A\u030angstro\u0308m",
    "中文分词测试，你好世界。",
    "日本語のテキスト",
    "한국어 텍스트",
    "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧‍👦 family 🏳️‍🌈",
    "<|begin_of_text|>special<|eot_id|> inside text <|start_header_id|>user<|end_header_id|>\n\nhi",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<s>[INST] hi [/INST] ok</s>",
    "<|endoftext|><|endoftext|>glued<|im_end|>x",
    "a <mask> b<mask>c   <mask>",
    "<tool_call>{\"name\": \"f\"}</tool_call>",
    "Ω≈ç√∫˜µ≤≥÷ ∑ ∞",
    "a" * 300,
    "    \n    \n\t\n",
    "mixed\u00a0nbsp and\u2003em\u3000space",
    "x" + " " * 17 + "y",
    "The quick brown fox jumps over the lazy dog. " * 5,
    "中文分词测试" * 300,  # one very long pre-token: exercises the merge queue
]

CONVERSATIONS = {
    "system_user_assistant": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "2+2 equals 4."},
    ],
    "multi_turn": [
        {"role": "system", "content": "  Be brief.  "},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": " Why did the GPU cross the road? "},
        {"role": "user", "content": "Another one\n"},
    ],
    "no_system": [
        {"role": "user", "content": "Write a haiku about tokenizers."},
        {"role": "assistant", "content": "Bytes merge into words\nranks decide which pairs combine\nids flow to the net"},
    ],
    "unicode": [
        {"role": "user", "content": "Traduis «bonjour» en 中文 et 日本語 😀"},
        {"role": "assistant", "content": "你好 / こんにちは 👋 — naïve café"},
    ],
    "single_user": [
        {"role": "user", "content": "   padded question   "},
    ],
}


# Keys sorted at every level: the C++ API takes nlohmann::json, whose objects are key-ordered.
TOOL = {"function": {"description": "Get the current weather", "name": "get_weather",
                     "parameters": {"properties": {"city": {"description": "City name", "type": "string"},
                                                   "unit": {"enum": ["celsius", "fahrenheit"], "type": "string"}},
                                    "required": ["city"], "type": "object"}},
        "type": "function"}


def byte_offsets(text, offsets):
    """tokenizers reports character offsets; the C++ API uses byte offsets."""
    prefix = [0]
    for ch in text:
        prefix.append(prefix[-1] + len(ch.encode("utf-8")))
    return [[prefix[b], prefix[e]] for b, e in offsets]


def train_bpe(tok, vocab_size, special_tokens=(), limit_alphabet=None, byte_level=True):
    kwargs = dict(vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False)
    if byte_level:
        kwargs["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
    if limit_alphabet is not None:
        kwargs["limit_alphabet"] = limit_alphabet
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(**kwargs))


def save(tok, out_dir, name, config, template, template_in_config=True, edit_json=None):
    """Saves with transformers, puts the chat template where requested, returns the reloaded tokenizer."""
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **config)
    fast.save_pretrained(d)
    if edit_json is not None:
        path = os.path.join(d, "tokenizer.json")
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        edit_json(j)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, indent=2)
    cfg_path = os.path.join(d, "tokenizer_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    jinja_path = os.path.join(d, "chat_template.jinja")
    if os.path.exists(jinja_path):
        os.remove(jinja_path)
    if template_in_config:
        cfg["chat_template"] = template
    else:
        cfg.pop("chat_template", None)
        with open(jinja_path, "w", encoding="utf-8") as f:
            f.write(template)
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    return d, AutoTokenizer.from_pretrained(d)


def merges_as_strings(j):
    j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]


def record(d, hf, extra_templates, chat_extra=None, tool_templates=(), conversations=None, variants=({},)):
    """Writes d/expected.json with the reference outputs of tokenizer `hf`.

    conversations: the family's own conversations, rendered after the shared ones; variants: extra
    template variables (e.g. enable_thinking) each conversation is also rendered with."""
    backend = hf.backend_tokenizer
    encodings = []
    for text in TEXTS:
        plain = backend.encode(text, add_special_tokens=False)
        special = backend.encode(text, add_special_tokens=True)
        encodings.append({
            "text": text,
            "ids": plain.ids,
            "offsets": byte_offsets(text, plain.offsets),
            "ids_special": special.ids,
            "offsets_special": byte_offsets(text, special.offsets),
            "decode": backend.decode(special.ids, skip_special_tokens=False),
            "decode_skip": backend.decode(special.ids, skip_special_tokens=True),
        })
    chats = []
    templates = {"default": None, **extra_templates}
    for tname, template in templates.items():
        for cname, messages in {**CONVERSATIONS, **(conversations or {})}.items():
            for variant in variants:
                for gen in (False, True):
                    kwargs = {**(chat_extra or {}), **variant}
                    case = {"template": tname, "conversation": cname, "messages": messages,
                            "add_generation_prompt": gen, "extra": kwargs}
                    try:
                        case["rendered"] = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen,
                                                                  chat_template=template, **kwargs)
                    except Exception as e:  # e.g. raise_exception for unsupported role orders
                        case["error"] = str(e)
                    chats.append(case)
    for tname in tool_templates:
        kwargs = dict(chat_extra or {})
        case = {"template": tname, "conversation": "tools", "messages": CONVERSATIONS["system_user_assistant"],
                "add_generation_prompt": True, "extra": {**kwargs, "tools": [TOOL]}}
        case["rendered"] = hf.apply_chat_template(case["messages"], tokenize=False, add_generation_prompt=True,
                                                  chat_template=templates[tname], tools=[TOOL], **kwargs)
        chats.append(case)
    expected = {
        "vocab_size": len(hf),
        "bos_token": hf.bos_token or "",
        "eos_token": hf.eos_token or "",
        "bos_id": hf.bos_token_id,
        "eos_id": hf.eos_token_id,
        "pad_id": hf.pad_token_id,
        "templates": {k: v for k, v in extra_templates.items()},
        "encodings": encodings,
        "chats": chats,
    }
    with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)


def llama3(out_dir):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    train_bpe(tok, 1500)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    d, hf = save(tok, out_dir, "llama3", dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>"), T.LLAMA3)
    # Llama 3.2's template asks strftime_now for the date unless date_string is given.
    record(d, hf, {"llama3_1": T.LLAMA3_1, "llama3_2": T.LLAMA3_2}, chat_extra={"date_string": "26 Jul 2024"},
           tool_templates=("llama3_1", "llama3_2"))


def qwen2(out_dir):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    train_bpe(tok, 1200)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in ["<tool_call>", "</tool_call>"]])
    d, hf = save(tok, out_dir, "qwen2", dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"), T.QWEN2_5,
                 edit_json=merges_as_strings)
    record(d, hf, {"chatml": T.CHATML}, tool_templates=("default",))


def smollm(out_dir):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    train_bpe(tok, 1000, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, normalized=False)])
    d, hf = save(tok, out_dir, "smollm", dict(bos_token="<|im_start|>", eos_token="<|im_end|>",
                                               pad_token="<|im_end|>"), T.SMOLLM2, template_in_config=False)
    record(d, hf, {})


def sentencepiece_vocab(j, specials=("<unk>", "<s>", "</s>")):
    """Rebuilds the trained vocab Llama-2 style: the specials, then <0x00>..<0xFF>, then the rest."""
    model = j["model"]
    trained = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    vocab = {s: i for i, s in enumerate(specials)}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for token, _ in trained:
        if token not in vocab:
            vocab[token] = len(vocab)
    model["vocab"] = vocab
    for added in j["added_tokens"]:
        added["id"] = vocab[added["content"]]
    pp = j.get("post_processor")
    if pp and pp.get("type") == "TemplateProcessing":
        for v in pp["special_tokens"].values():
            v["ids"] = [vocab[t] for t in v["tokens"]]


def mistral(out_dir):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    train_bpe(tok, 700, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=120, byte_level=False)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    d, hf = save(tok, out_dir, "mistral", dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>"),
                 T.MISTRAL_V0_1, edit_json=sentencepiece_vocab)
    record(d, hf, {"mistral_v0_3": T.MISTRAL_V0_3}, tool_templates=("mistral_v0_3",))

    # The newer layout (Mistral v0.3 / Llama-2 from recent tokenizers): Metaspace instead of the
    # Prepend+Replace normalizer.
    def metaspace(j):
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
        j["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
            {"type": "ByteFallback"}, {"type": "Fuse"}]}
    src = os.path.join(out_dir, "mistral")
    dst = os.path.join(out_dir, "mistral_metaspace")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    path = os.path.join(dst, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    metaspace(j)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=2)
    os.remove(os.path.join(dst, "expected.json"))
    record(dst, AutoTokenizer.from_pretrained(dst), {})


# Qwen3: reasoning in assistant history (inline <think> blocks and reasoning_content), tool calls
# and tool responses (the template looks back for the last real user query), all rendered with and
# without enable_thinking.
QWEN3_CONVERSATIONS = {
    "thinking_history": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nAdd two and two.\n</think>\n\n2+2 equals 4."},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "<think>\n\nEasy: six.\n\n</think>\n\n\n6."},
    ],
    "thinking_last_turn": [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": "<think>Something about GPUs.</think>Why did the GPU cross the road?"},
    ],
    "reasoning_content": [
        {"role": "user", "content": "What is 2+2?"},
        {"content": "4", "reasoning_content": "\nTwo plus two.\n", "role": "assistant"},
        {"role": "user", "content": "Sure?"},
        {"content": "Yes.", "reasoning_content": None, "role": "assistant"},
    ],
    "tool_calls": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"content": "", "role": "assistant", "tool_calls": [
            {"function": {"arguments": {"city": "Paris"}, "name": "get_weather"}, "type": "function"},
            {"function": {"arguments": "{\"city\": \"Rome\"}", "name": "get_weather"}, "type": "function"}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "{\"temp\": 25}"},
        {"content": "<think>\nBoth warm.\n</think>\n\nParis 21, Rome 25.", "role": "assistant"},
        {"role": "user", "content": "<tool_response>\nlate\n</tool_response>"},
    ],
}

# Gemma 3: content given as parts (text and image), and roles that do not alternate (raise_exception).
GEMMA3_CONVERSATIONS = {
    "content_parts": [
        {"role": "system", "content": [{"text": "Be kind.", "type": "text"}]},
        {"role": "user", "content": [{"text": " Describe this: ", "type": "text"}, {"type": "image"}]},
        {"role": "assistant", "content": [{"text": "A cat. ", "type": "text"}]},
    ],
    "not_alternating": [
        {"role": "user", "content": "Hi"},
        {"role": "user", "content": "Hello?"},
    ],
}

# Phi-4-mini-instruct puts a system message's "tools" (a JSON string) between <|tool|> markers.
PHI4_CONVERSATIONS = {
    "system_tools": [
        {"content": "You can call tools.", "role": "system", "tools": json.dumps([TOOL["function"]])},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Sunny."},
    ],
}


def qwen3(out_dir):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    train_bpe(tok, 1200)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    # Qwen3 ships its reasoning and tool markers as added tokens that are not special.
    tok.add_tokens([AddedToken(s, special=False, normalized=False)
                    for s in ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>",
                              "</think>"]])
    d, hf = save(tok, out_dir, "qwen3", dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"), T.QWEN3,
                 edit_json=merges_as_strings)
    record(d, hf, {}, tool_templates=("default",), conversations=QWEN3_CONVERSATIONS,
           variants=({}, {"enable_thinking": False}, {"enable_thinking": True}))


def gemma3(out_dir):
    # Gemma 3's layout: spaces become U+2581 in the normalizer (no dummy prefix), byte fallback, <bos> added.
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    train_bpe(tok, 700, special_tokens=specials, limit_alphabet=120, byte_level=False)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", tok.token_to_id("<bos>"))])
    d, hf = save(tok, out_dir, "gemma3", dict(bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                               unk_token="<unk>"),
                 T.GEMMA3, edit_json=lambda j: sentencepiece_vocab(j, specials))
    record(d, hf, {}, conversations=GEMMA3_CONVERSATIONS)


def phi4(out_dir):
    # Phi-4's tokenizer is tiktoken's cl100k converted: Llama 3's split pattern, byte-level, no BOS added.
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    train_bpe(tok, 1300)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_sep|>", "<|im_end|>", "<|dummy_85|>",
                # Phi-4-mini-instruct's markers
                "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|tool|>", "<|/tool|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    d, hf = save(tok, out_dir, "phi4", dict(bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                             pad_token="<|dummy_85|>"), T.PHI4)
    record(d, hf, {"phi4_mini": T.PHI4_MINI}, conversations=PHI4_CONVERSATIONS)


# gpt-oss: a thinking field (rendered only in a training conversation's last assistant turn), a
# developer instruction, a tool call and its result.
GPT_OSS_CONVERSATIONS = {
    "thinking": [
        {"role": "user", "content": "What is 2+2?"},
        {"content": "4.", "role": "assistant", "thinking": "Add them."},
        {"role": "user", "content": "And 3+3?"},
        {"content": "6.", "role": "assistant", "thinking": "Add again."},
    ],
    "developer_tool_call": [
        {"role": "developer", "content": "Answer with the tool."},
        {"role": "user", "content": "Weather in Paris?"},
        {"content": "", "role": "assistant",
         "tool_calls": [{"function": {"arguments": {"city": "Paris"}, "name": "get_weather"}, "type": "function"}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "21 degrees."},
    ],
}


def gpt_oss(out_dir):
    # gpt-oss's tokenizer is tiktoken's o200k_harmony converted: o200k's split, byte-level, harmony's markers.
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    train_bpe(tok, 1300)
    specials = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
                "<|end|>", "<|message|>", "<|call|>"]
    tok.add_special_tokens([AddedToken(x, special=True, normalized=False) for x in specials])
    d, hf = save(tok, out_dir, "gpt_oss", dict(bos_token="<|startoftext|>", eos_token="<|return|>",
                                                pad_token="<|endoftext|>"), T.GPT_OSS)
    record(d, hf, {}, tool_templates=("default",), conversations=GPT_OSS_CONVERSATIONS,
           variants=({}, {"reasoning_effort": "high"}))


# Variables go through nlohmann::json on the C++ side, whose objects are key-ordered: keep keys sorted.
JINJA_CASES = [
    ("whitespace", "{% if true %}\n  yes\n{% endif %}\n  {%- for i in range(3) %} {{ i }} {% endfor -%}  end\n", {}),
    ("lstrip", "  {% if x %}\n    a\n  {% endif %}\nb  {% if x %}c{% endif %}\n\t{# note #}\nd", {"x": True}),
    ("plus_markers", "  {%+ if x %}a{% endif +%}\nb\n{{- ' c' -}}\n  d", {"x": 1}),
    ("comments", "a {#- c -#} b\n  {# line #}\nc{# x #}d", {}),
    ("loop_vars", "{% for m in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.first }}/"
                  "{{ loop.last }}/{{ loop.revindex }}/{{ loop.revindex0 }}{% if not loop.last %},{% endif %}{% endfor %}",
     {"items": ["a", "b", "c"]}),
    ("loop_prev_next", "{% for x in xs %}[{{ loop.previtem | default('-') }}<{{ x }}>{{ loop.nextitem | default('-') }}]"
                       "{% endfor %}", {"xs": [1, 2, 3]}),
    ("loop_else_filter", "{% for x in xs if x > 1 %}{{ x }}:{{ loop.index }} {% else %}none{% endfor %}|"
                         "{% for x in [] %}x{% else %}empty{% endfor %}", {"xs": [1, 2, 3, 0, 5]}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}"
                       "{% endif %}{{ x }}{% endfor %}", {}),
    ("namespace", "{% set ns = namespace(found=false, n=0) %}{% for x in xs %}{% if x == 2 %}{% set ns.found = true %}"
                  "{% endif %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.found }} {{ ns.n }}", {"xs": [1, 2, 3]}),
    ("scoping", "{% set a = 1 %}{% for x in [1] %}{% set a = 2 %}{{ a }}{% endfor %}{{ a }}"
                "{% if true %}{% set b = 3 %}{% endif %}{{ b }}", {}),
    ("unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d | items %}{{ k }}{% endfor %}"
               "{% set p, q = [1, 2] %}{{ p + q }}", {"d": {"a": [1, 2], "b": 1}}),
    ("filters_text", "{{ '  hi  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Straße' | upper }}|{{ 'ÀB' | lower }}|"
                     "{{ 'hello world' | capitalize }}|{{ 'hello big-world (x)' | title }}|{{ 'aXbXc' | replace('X', '-') }}|"
                     "{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ 'one two  three' | wordcount }}",
     {}),
    ("filters_seq", "{{ xs | length }}|{{ xs | first }}|{{ xs | last }}|{{ xs | join(', ') }}|{{ xs | reverse | list }}|"
                    "{{ xs | sort }}|{{ xs | unique | list }}|{{ xs | sum }}|{{ xs | min }}|{{ xs | max }}|"
                    "{{ 'abc' | list }}|{{ 'abc' | reverse }}|{{ d | length }}|{{ none | string }}",
     {"xs": [3, 1, 2, 3], "d": {"a": 1}}),
    ("filters_attr", "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('+') }}|"
                     "{{ ms | rejectattr('role', 'equalto', 'user') | list | length }}|"
                     "{{ ms | selectattr('tool_calls', 'undefined') | list | length }}|"
                     "{{ ms | selectattr('tool_calls', 'defined') | map(attribute='role') | list }}|"
                     "{{ [0, 1, '', 'a', none] | select | list }}|{{ [1, 2, 3, 4] | reject('odd') | list }}|"
                     "{{ ['a', 'B'] | map('upper') | join }}|{{ ms | map(attribute='missing', default='?') | join }}",
     {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": []},
             {"role": "user", "content": "c"}]}),
    ("filters_num", "{{ '42' | int }}|{{ 3.9 | int }}|{{ 'x' | int }}|{{ '2.5' | float }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|"
                    "{{ 2.5 | round }}|{{ 7 | float }}", {}),
    ("default", "{{ missing | default('d') }}|{{ '' | default('e', true) }}|{{ none | default('n') }}|"
                "{{ missing | d }}|{{ x | default('no') }}", {"x": 0}),
    ("tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ s | tojson }}|{{ s | tojson(ensure_ascii=true) }}|"
               "{{ [1, 2.5, true, none, 'x'] | tojson }}|{{ {} | tojson }}|{{ d | tojson(indent=4, sort_keys=true) }}|"
               "{{ d | tojson(separators=(',', ':')) }}",
     {"d": {"name": "get_weather", "parameters": {"empty": {}, "list": [], "properties": {"city": {"type": "string"}},
                                                  "required": ["city"], "type": "object"}},
      "s": "é\"\\\n\t😀\u0001"}),
    ("tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}"
              "{{ d is mapping }}{{ xs is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ xs is sequence }}"
              "{{ 1 is number }}{{ 1.5 is integer }}{{ 2 is integer }}{{ true is boolean }}{{ 3 is odd }}{{ 4 is even }}"
              "{{ 9 is divisibleby 3 }}{{ 'a' is equalto 'a' }}{{ 2 is in xs }}{{ x is not none }}{{ not y is defined }}"
              "{{ 'abc' is lower }}{{ d.k is defined }}{{ d.zz is defined }}",
     {"x": 1, "d": {"k": 1}, "xs": [1, 2]}),
    ("operators", "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|"
                  "{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 'b' in 'abc' }}|"
                  "{{ 'z' not in xs }}|{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ none or '' }}|{{ 'yes' if x else 'no' }}|"
                  "{{ 'a' if false }}|{{ -x }}|{{ 1 == 1.0 }}|{{ 1 != 2 }}|{{ 'a' < 'b' }}|{{ 0.1 + 0.2 }}|{{ 2.0 * 3 }}",
     {"x": 5, "xs": ["a"]}),
    ("slicing", "{{ xs[1:] }}|{{ xs[:-1] }}|{{ xs[::-1] }}|{{ xs[::2] }}|{{ s[1:3] }}|{{ s[-3:] }}|{{ xs[-1] }}|"
                "{{ xs.0 }}|{{ s[0] }}|{{ xs[10] is defined }}|{{ s[::-1] }}|{{ xs[1:-1:1] }}",
     {"xs": [1, 2, 3, 4], "s": "héllo😀"}),
    ("str_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a b  c'.split() }}|"
                    "{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'abc'.startswith('ab') }}|"
                    "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aBc'.upper() }}|{{ 'aBc'.lower() }}|{{ 'a-b'.replace('-', '+') }}|"
                    "{{ 'hi there'.title() }}|{{ 'hI'.capitalize() }}|{{ 'héllo'.find('l') }}|{{ 'banana'.count('an') }}|"
                    "{{ '-'.join(['a', 'b']) }}|{{ '</think>x'.split('</think>')[-1] }}",
     {"s": "  \tpadded \n "}),
    ("dict_methods", "{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('a') }}|{{ d.get('z', 'dflt') }}|"
                     "{{ d.get('z') }}|{% for k in d %}{{ k }}{% endfor %}", {"d": {"a": 1, "b": 2}}),
    ("macros", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} "
               "{{ greet('b', punct='?') }} {{ greet(name='c') | upper }}", {}),
    ("set_block", "{% set x %}  inner {{ 1 }} {% endset %}[{{ x }}]", {}),
    ("printing", "{{ none }}|{{ true }}|{{ false }}|{{ [1, 'a', none, true, 2.5] }}|{{ {'a': 'b', 'c': [1]} }}|"
                 "{{ 1.0 }}|{{ 0.1 }}|{{ 1e-05 }}|{{ 1e20 }}|{{ 123456789.0 }}|{{ [\"it's\", 'say \"hi\"'] }}|{{ -0.5 }}",
     {}),
    ("undefined", "[{{ missing }}]{{ missing is defined }}{% for x in missing %}x{% endfor %}{{ missing | length }}"
                  "{% if missing %}t{% else %}f{% endif %}{{ d.nokey }}", {"d": {}}),
    ("literals", "{{ {'a': 1, 'b': [1, 2]} | tojson }}|{{ \"}}\" }}|{{ 'a\\nb' }}|{{ '\\u00e9\\x41' }}|{{ 'it''s' }}|"
                 "{{ (1, 2) }}|{{ () }}|{{ [] }}|{{ 1_000 }}|{{ 'a' 'b' }}", {}),
    ("generation", "{% generation %}x{{ 1 }}{% endgeneration %}y", {}),
    ("dict_global", "{{ dict(a=1, b='x') | tojson }}|{{ range(2, 8, 3) | list }}", {}),
    ("raise", "{% if x %}{{ raise_exception('Conversation roles must alternate!') }}{% endif %}ok", {"x": True}),
    # Qwen3's enable_thinking check and reasoning extraction.
    ("bool_tests", "{{ f is false }}{{ 0 is false }}{{ none is false }}{{ missing is false }}{{ t is true }}"
                   "{{ 1 is true }}{{ missing is defined and missing is false }}", {"f": False, "t": True}),
    ("think_split", "{% for m in ms[::-1] %}{{ (ms | length - 1) - loop.index0 }}:"
                    "{% if '</think>' in m %}"
                    "[{{ m.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}]"
                    "[{{ m.split('</think>')[-1].lstrip('\\n') }}]{% else %}{{ m }}{% endif %};{% endfor %}",
     {"ms": ["<think>\nr1\n</think>\n\na1", "plain", "no open</think>a3", "<think></think>"]}),
]


def jinja_cases(out_dir):
    cases = []
    for name, template, variables in JINJA_CASES:
        case = {"name": name, "template": template, "vars": variables}
        try:
            case["rendered"] = _compile_jinja_template(template).render(**variables)
        except Exception as e:
            case["error"] = str(e)
        cases.append(case)
    with open(os.path.join(out_dir, "jinja_cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    llama3(out_dir)
    qwen2(out_dir)
    smollm(out_dir)
    mistral(out_dir)
    qwen3(out_dir)
    gemma3(out_dir)
    phi4(out_dir)
    gpt_oss(out_dir)
    jinja_cases(out_dir)
    print("wrote fixtures to", out_dir)


if __name__ == "__main__":
    main()
