#!/usr/bin/env python3
"""Reference fixtures for kubetune_data_tests.

Usage: make_fixtures.py OUT_DIR

Writes under OUT_DIR:
  tok_llama/, tok_chatml/, tok_unstable/, tok_nochat/   tiny byte-level BPE tokenizers (save_pretrained)
  *.jsonl                                               datasets, good and broken
  cases.json     reference input_ids/labels per (tokenizer, file, options), computed with transformers
  errors.json    broken inputs and what their error message must contain
  sampler.json   epoch permutations from an independent Python mt19937_64 + Fisher-Yates
"""
import json
import os
import shutil
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "text"))
import real_templates  # noqa: E402  (the published chat templates, shared with tests/text)

IGNORE = -100

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? The capital of France is Paris.",
    "You are a helpful assistant. Answer briefly and politely.",
    "Hello! How can I help you today? I'd like to know about tokenizers.",
    "Numbers like 12345 and 3.14159 are split into short pieces.",
    "Ça va? Très bien, merci. 日本語のテキストも少し。 Emoji: 🙂👍",
    "def add(a, b):\n    return a + b\n",
    "Translate to German: good morning -> Guten Morgen.",
] * 4

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Llama-3 style: BOS written by the template, header/eot markers, content trimmed.
LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}"
)

# ChatML (Qwen-2 style) with a default system prompt when the conversation has none.
CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

# Marks the last message, so a prefix of the conversation is not rendered as a prefix.
UNSTABLE_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{%- if loop.last %}{{- '(last) ' }}{%- endif %}"
    "{{- message['content'] + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}"
)


def train_bpe(specials, pre_tokenizer):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def save(tok, out, template, **special):
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **special)
    if template is not None:
        fast.chat_template = template
    fast.save_pretrained(out)
    # Some transformers versions write the template only to chat_template.jinja; keep it in
    # tokenizer_config.json too (identical), which is where most published models have it.
    if template is not None:
        path = os.path.join(out, "tokenizer_config.json")
        with open(path) as f:
            config = json.load(f)
        config["chat_template"] = template
        with open(path, "w") as f:
            json.dump(config, f, indent=2, ensure_ascii=False)


def make_llama(out):
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>", "<|pad|>"]
    tok = train_bpe(specials, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    for name, template in (("tok_llama", LLAMA3_TEMPLATE), ("tok_unstable", UNSTABLE_TEMPLATE),
                           ("tok_nochat", None)):
        save(tok, os.path.join(out, name), template, bos_token="<|begin_of_text|>",
             eos_token="<|eot_id|>", pad_token="<|pad|>")


def make_chatml(out):
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = train_bpe(specials, pre_tokenizers.ByteLevel(add_prefix_space=False))
    save(tok, os.path.join(out, "tok_chatml"), CHATML_TEMPLATE, eos_token="<|im_end|>",
         pad_token="<|endoftext|>")
    # Qwen3's published template: reasoning kept only after the last user message.
    tok.add_tokens(["<think>", "</think>"])
    save(tok, os.path.join(out, "tok_qwen3"), real_templates.QWEN3, eos_token="<|im_end|>",
         pad_token="<|endoftext|>")


def make_phi4_mini(out):
    specials = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
    tok = train_bpe(specials, pre_tokenizers.ByteLevel(add_prefix_space=False))
    # Phi-4-mini's published template ends a conversation without a generation prompt with EOS.
    save(tok, os.path.join(out, "tok_phi4mini"), real_templates.PHI4_MINI,
         eos_token="<|endoftext|>", pad_token="<|endoftext|>")


# ---------------------------------------------------------------------------------------------
# Datasets. Each is a list of lines (None = blank line) so line numbers are explicit.

def msg(role, content, **extra):
    return dict(role=role, content=content, **extra)


MESSAGES = [
    {"messages": [msg("system", "You are a helpful assistant."),
                  msg("user", "What is the capital of France?"),
                  msg("assistant", "The capital of France is Paris.")]},
    None,
    {"messages": [msg("user", "Hello!"), msg("assistant", "Hello! How can I help you today?"),
                  msg("user", "Translate to German: good morning"),
                  msg("assistant", "Guten Morgen.")]},
    {"messages": [msg("user", "Ça va? 日本語"), msg("assistant", "  Très bien, merci 🙂  \n")]},
    None,
    None,
    {"messages": [msg("user", "def add(a, b):", name="alice"),
                  msg("assistant", "    return a + b\n"), msg("user", "thanks")]},
]

# Qwen3-style reasoning: inline <think> blocks and reasoning_content in earlier turns.
REASONING = [
    {"messages": [msg("user", "What is the capital of France?"),
                  msg("assistant", "<think>\nThe user asks about France.\n</think>\n\nParis."),
                  msg("user", "And of Germany?"),
                  msg("assistant", "Berlin.", reasoning_content="Germany's capital is Berlin.")]},
    {"messages": [msg("system", "Answer briefly."), msg("user", "Hello!"),
                  msg("assistant", "Hello! How can I help you today?")]},
    {"messages": [msg("user", "Hello!"), msg("assistant", "Hi."), msg("user", "Bye."),
                  msg("assistant", "Bye.")]},
]

PROMPT_COMPLETION = [
    {"prompt": "What is the capital of France?", "completion": " Paris."},
    {"prompt": "Numbers like 12345", "completion": " and 3.14159 are split."},
    None,
    {"prompt": "", "completion": "Hello! How can I help you today?"},
    {"prompt": "Say bye.", "completion": " Bye.<|eot_id|>", "extra_field": 1},
]

CONV_PROMPT_COMPLETION = [
    {"prompt": [msg("system", "Answer briefly."), msg("user", "Capital of France?")],
     "completion": [msg("assistant", "Paris.")]},
    {"prompt": [msg("user", "Hello!"), msg("assistant", "Hello! How can I help?"),
                msg("user", "Good morning in German?")],
     "completion": [msg("assistant", "Guten Morgen.")]},
]

TEXT = [
    {"text": "The quick brown fox jumps over the lazy dog."},
    {"text": "Ça va? 日本語のテキスト 🙂\n\nNumbers 12345."},
    None,
    {"text": "The end.<|eot_id|>"},
]

LONG_PROMPT = " ".join(["The quick brown fox jumps over the lazy dog."] * 6)


def write_jsonl(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write("" if line is None else (line if isinstance(line, str) else
                                               json.dumps(line, ensure_ascii=False)))
            f.write("\n")


def records(lines):
    """(1-based line, record) of the non-blank lines."""
    return [(i + 1, r) for i, r in enumerate(lines) if r is not None]


# ---------------------------------------------------------------------------------------------
# Reference encoding with transformers.

def render(tok, messages, gen):
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)


def encode_conversation(tok, messages, first_target, loss_on):
    full = render(tok, messages, False)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    if loss_on == "all":
        return ids, list(ids)
    spans = []
    for i in range(first_target, len(messages)):
        if messages[i]["role"] != "assistant":
            continue
        before = render(tok, messages[:i], True)
        through = render(tok, messages[:i + 1], False)
        assert full.startswith(before), "fixture template unstable"
        if not full.startswith(through):
            # README (data): a turn the template writes differently once the conversation goes on
            # is context (Qwen3's turns before the last user message lose their reasoning); the
            # EOS token every conversation ends with (Phi-4-mini) is not the turn's.
            eos = tok.eos_token
            if through.endswith(eos) and full.endswith(eos) and full.startswith(through[:-len(eos)]):
                through = through[:-len(eos)]
            else:
                assert any(m["role"] == "user" for m in messages[i + 1:]), "fixture template unstable"
                continue
        spans.append((len(before), len(through)))
    # Offsets are character offsets here and byte offsets in C++; the span edges are character
    # boundaries, so "the token starts inside a span" is the same test in both.
    labels = [t if any(b <= start < e for b, e in spans) else IGNORE
              for t, (start, _) in zip(ids, enc["offset_mapping"])]
    return ids, labels


def with_eos(tok, ids):
    return ids if ids and ids[-1] == tok.eos_token_id else ids + [tok.eos_token_id]


def encode_record(tok, record, loss_on):
    if "messages" in record:
        return encode_conversation(tok, record["messages"], 0, loss_on)
    if "prompt" in record:
        if isinstance(record["prompt"], list):
            return encode_conversation(tok, record["prompt"] + record["completion"],
                                       len(record["prompt"]), loss_on)
        prompt = tok(record["prompt"])["input_ids"]  # add_special_tokens=True: BOS if any
        completion = tok(record["completion"], add_special_tokens=False)["input_ids"]
        ids = with_eos(tok, prompt + completion)
        labels = list(ids) if loss_on == "all" else [IGNORE] * len(prompt) + ids[len(prompt):]
        return ids, labels
    ids = with_eos(tok, tok(record["text"])["input_ids"])
    return ids, list(ids)


def n_targets(labels):
    return sum(1 for label in labels[1:] if label != IGNORE)


def reference_case(out, tokenizer, file, lines, loss_on="completion", max_length=2048,
                   fmt="auto", name=None):
    tok = AutoTokenizer.from_pretrained(os.path.join(out, tokenizer))
    examples = []
    for line, record in records(lines):
        ids, labels = encode_record(tok, record, loss_on)
        ids, labels = ids[:max_length], labels[:max_length]
        assert n_targets(labels) > 0, (file, line)
        examples.append({"line": line, "input_ids": ids, "labels": labels})
    return {"name": name or f"{tokenizer}/{file}/{fmt}/{loss_on}/{max_length}", "tokenizer": tokenizer,
            "file": file, "format": fmt, "loss_on": loss_on, "max_length": max_length,
            "examples": examples}


def shortest_safe_length(case):
    """The smallest max_length that still leaves every example a target, plus a little."""
    need = 0
    for ex in case["examples"]:
        first = next(t for t in range(1, len(ex["labels"])) if ex["labels"][t] != IGNORE)
        need = max(need, first + 1)
    return need + 2


# ---------------------------------------------------------------------------------------------
# Sampler reference: an independent mt19937_64 (the C++ standard fixes its output) + Fisher-Yates.

MASK64 = (1 << 64) - 1


class MT19937_64:
    N, M = 312, 156

    def __init__(self, seed):
        self.mt = [seed & MASK64]
        for i in range(1, self.N):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK64)
        self.index = self.N

    def _twist(self):
        upper, lower = MASK64 ^ ((1 << 31) - 1), (1 << 31) - 1
        for i in range(self.N):
            x = (self.mt[i] & upper) | (self.mt[(i + 1) % self.N] & lower)
            xa = (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
            self.mt[i] = self.mt[(i + self.M) % self.N] ^ xa
        self.index = 0

    def __call__(self):
        if self.index >= self.N:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def uniform_below(engine, bound):
    threshold = ((1 << 64) - bound) % bound
    while True:
        r = engine()
        if r >= threshold:
            return r % bound


def permutation(n, seed, epoch):
    order = list(range(n))
    engine = MT19937_64(splitmix64(splitmix64(seed) ^ epoch))
    for i in range(n, 1, -1):
        j = uniform_below(engine, i)
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def check_mt19937_64():
    engine = MT19937_64(5489)  # the standard: the 10000th output of a default-constructed engine
    for _ in range(9999):
        engine()
    assert engine() == 9981545732273789042, "Python mt19937_64 does not match the C++ standard"


# ---------------------------------------------------------------------------------------------

def main():
    out = sys.argv[1]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    make_llama(out)
    make_chatml(out)
    make_phi4_mini(out)

    datasets = {
        "messages.jsonl": MESSAGES,
        "prompt_completion.jsonl": PROMPT_COMPLETION,
        "conv_prompt_completion.jsonl": CONV_PROMPT_COMPLETION,
        "text.jsonl": TEXT,
        "reasoning.jsonl": REASONING,
        "multi_turn.jsonl": MESSAGES[:5],  # conversations that end with the assistant
    }
    for file, lines in datasets.items():
        write_jsonl(os.path.join(out, file), lines)
    # The same records with Windows line endings.
    with open(os.path.join(out, "messages_crlf.jsonl"), "w", encoding="utf-8", newline="\r\n") as f:
        for line in MESSAGES:
            f.write("" if line is None else json.dumps(line, ensure_ascii=False))
            f.write("\n")

    cases = []
    for tokenizer in ("tok_llama", "tok_chatml"):
        for loss_on in ("completion", "all"):
            for file in ("messages.jsonl", "conv_prompt_completion.jsonl"):
                cases.append(reference_case(out, tokenizer, file, datasets[file], loss_on))
        cases.append(reference_case(out, tokenizer, "text.jsonl", TEXT))
        cases.append(reference_case(out, tokenizer, "text.jsonl", TEXT, max_length=5))
        cases.append(reference_case(out, tokenizer, "messages.jsonl", MESSAGES, fmt="messages"))
        cases.append(reference_case(out, tokenizer, "messages_crlf.jsonl", MESSAGES))
    for loss_on in ("completion", "all"):  # the ChatML tokenizer has no EOS in its text
        cases.append(reference_case(out, "tok_llama", "prompt_completion.jsonl", PROMPT_COMPLETION,
                                    loss_on))
    pc_chatml = [r for r in PROMPT_COMPLETION if r is None or "eot_id" not in r["completion"]]
    write_jsonl(os.path.join(out, "prompt_completion_chatml.jsonl"), pc_chatml)
    cases.append(reference_case(out, "tok_chatml", "prompt_completion_chatml.jsonl", pc_chatml))
    # Truncation that cuts into the assistant turns but leaves every record a target.
    for tokenizer in ("tok_llama", "tok_chatml"):
        full = reference_case(out, tokenizer, "messages.jsonl", MESSAGES)
        length = shortest_safe_length(full)
        assert length < max(len(e["input_ids"]) for e in full["examples"])
        cases.append(reference_case(out, tokenizer, "messages.jsonl", MESSAGES,
                                    max_length=length))
    # Published templates that are not prefix-stable: Qwen3 (earlier turns are context) and
    # Phi-4-mini (the closing EOS is not the turn's), on multi-turn conversations.
    for tokenizer in ("tok_qwen3", "tok_phi4mini"):
        cases.append(reference_case(out, tokenizer, "reasoning.jsonl", REASONING))
        cases.append(reference_case(out, tokenizer, "multi_turn.jsonl", MESSAGES[:5]))
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f)

    # Broken inputs: (file, lines, expected line or None, substrings, options).
    good = MESSAGES[0]
    broken = [
        ("bad_json.jsonl", [good, good, '{"messages": [', good], 3, ["invalid JSON"], {}),
        ("wrong_type.jsonl", [good, {"messages": "hi"}], 2,
         ['field "messages"', "expected an array", "got string"], {}),
        ("wrong_content.jsonl", [{"messages": [msg("user", "x"), {"role": "assistant",
                                                                   "content": None}]}], 1,
         ['"messages[1].content"', "expected a string", "got null"], {}),
        ("no_role.jsonl", [good, None, {"messages": [{"content": "x"}]}], 3,
         ['"messages[0].role"', "missing"], {}),
        ("no_assistant.jsonl", [good, {"messages": [msg("user", "Hello!")]}], 2,
         ["no assistant"], {}),
        ("empty.jsonl", [], None, ["no records"], {}),
        ("blank_only.jsonl", [None, "   ", None], None, ["no records"], {}),
        ("mixed_formats.jsonl", [good, None, {"text": "hello"}], 3,
         ["text", "line 1", "messages", "one format"], {}),
        ("unknown_format.jsonl", [{"question": "x", "answer": "y"}], 1,
         ["unknown record format", '"question"'], {}),
        ("not_object.jsonl", [good, "[1, 2]"], 2, ["expected a JSON object"], {}),
        ("truncated.jsonl", [{"prompt": "Hi.", "completion": " Hello."}, {"prompt": LONG_PROMPT, "completion": " ok"}], 2,
         ["data.maxLength", "truncat"], {"max_length": 16}),
        ("text_as_messages.jsonl", [{"text": "hello"}], 1, ['field "messages"', "missing"],
         {"format": "messages"}),
        ("half_conversational.jsonl", [{"prompt": [msg("user", "x")], "completion": "y"}], 1,
         ["both be strings"], {}),
        ("messages.jsonl", None, 1, ["prefix-stable"], {"tokenizer": "tok_unstable"}),
        ("messages.jsonl", None, 1, ["chat template"], {"tokenizer": "tok_nochat", "chat": False}),
        ("empty_text.jsonl", [{"text": ""}], 1, ["no target tokens"],
         {"tokenizer": "tok_chatml"}),
        ("missing_file.jsonl", None, None, ["cannot open"], {}),
    ]
    errors = []
    for file, lines, line, contains, options in broken:
        if lines is not None:
            write_jsonl(os.path.join(out, file), lines)
        errors.append({"file": file, "line": line, "contains": contains,
                       "tokenizer": options.get("tokenizer", "tok_llama"),
                       "chat": options.get("chat", True), "format": options.get("format", "auto"),
                       "loss_on": "completion", "max_length": options.get("max_length", 2048)})
    with open(os.path.join(out, "errors.json"), "w") as f:
        json.dump(errors, f, indent=1)

    check_mt19937_64()
    sampler = [{"n": n, "seed": seed, "epoch": epoch, "order": permutation(n, seed, epoch)}
               for n in (1, 2, 7, 100, 1000)
               for seed in (0, 42, (1 << 63) + 5)
               for epoch in (0, 1, 5)]
    with open(os.path.join(out, "sampler.json"), "w") as f:
        json.dump(sampler, f)


if __name__ == "__main__":
    main()
