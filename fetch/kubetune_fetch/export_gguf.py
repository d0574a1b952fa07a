"""GGUF files from a Hugging Face model folder, made by llama.cpp's own tools: what llama.cpp and
Ollama serve after a fine-tune (a merged model, `output.saveMerged`, or a full fine-tune's folder).

Why llama.cpp's tools and not a GGUF writer of ours: the conversion is where llama.cpp decides a
family's tensor names, its rotary layout and above all its tokenizer (a BPE pre-tokenizer is
recognised by what it does to a test text, and an unknown one is refused rather than guessed). A
writer of ours would have to follow every llama.cpp release to stay loadable. So:
- llama.cpp's converter (`convert_hf_to_gguf.py`, with the gguf-py beside it) writes f32, f16,
  bf16 and q8_0 itself;
- the k-quants (q4_k_m, q5_k_m, q6_k, ...) and q4_0 are quantized from its 16-bit file by
  llama.cpp's quantizer (`llama_model_quantize`, through llama-cpp-python: the library the tests
  load the files with, and the one `llama-quantize` wraps).
Both come from one llama.cpp: the sources llama-cpp-python's release vendors, found at
$KUBETUNE_LLAMA_CPP (the export image unpacks them at /opt/llama.cpp).

    python3 -m kubetune_fetch.export_gguf MODEL_DIR --out DIR --type q8_0 [--type q4_k_m ...]

writes DIR/model-<type>.gguf for each type, each whole or not at all: written as .partial beside
it and renamed once complete, so a reader (an upload, a server) never takes half a file for one.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# What the converter writes itself (its --outtype) and what llama.cpp's quantizer makes from its
# 16-bit output (llama.h's LLAMA_FTYPE_MOSTLY_<NAME>).
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")
QUANTIZER_TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_m", "q4_k_s", "q4_k_m", "q5_k_s",
                   "q5_k_m", "q6_k")
TYPES = CONVERTER_TYPES + QUANTIZER_TYPES
LLAMA_CPP_ENV = "KUBETUNE_LLAMA_CPP"


class ExportError(Exception):
    """An export that cannot be made, with what to do about it."""


def converter_script() -> Path:
    home = os.environ.get(LLAMA_CPP_ENV, "/opt/llama.cpp")
    script = Path(home) / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise ExportError(f"llama.cpp's converter is not at {script}: set {LLAMA_CPP_ENV} to a llama.cpp "
                          "source folder (the export image has one at /opt/llama.cpp)")
    return script


def gguf_name(kind: str) -> str:
    return f"model-{kind}.gguf"


def _last_lines(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def convert(model_dir: Path, kind: str, out: Path) -> None:
    """llama.cpp's converter, writing `out` as `kind` (one of CONVERTER_TYPES)."""
    partial = out.with_name(out.name + ".partial")
    run = subprocess.run([sys.executable, str(converter_script()), str(model_dir), "--outtype", kind,
                          "--outfile", str(partial)], capture_output=True, text=True, errors="replace")
    if run.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise ExportError(f"{model_dir}: llama.cpp's converter could not write {kind} "
                          f"(exit {run.returncode}):\n{_last_lines(run.stderr + run.stdout)}")
    os.replace(partial, out)


def quantize(source: Path, kind: str, out: Path) -> None:
    """llama.cpp's quantizer, `source` (a 16- or 32-bit GGUF) to `out` as `kind`."""
    import llama_cpp  # the export image's; imported here so the converter's types need none

    ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + kind.upper(), None)
    if ftype is None:
        raise ExportError(f"this llama.cpp has no quantization type {kind}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = os.cpu_count() or 1
    partial = out.with_name(out.name + ".partial")
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), ctypes.byref(params))
    if status != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise ExportError(f"{source}: llama.cpp's quantizer could not write {kind} (status {status})")
    os.replace(partial, out)


def export(model_dir: Path, out_dir: Path, kinds, log=print) -> list:
    """Writes one GGUF file per kind into `out_dir` and returns their paths. The k-quants share one
    16-bit intermediate (the f16 or bf16 asked for, else a temporary bf16 one)."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    unknown = [k for k in kinds if k not in TYPES]
    if unknown:
        raise ExportError(f"unknown GGUF type(s) {', '.join(unknown)}; known: {', '.join(TYPES)}")
    if not (model_dir / "config.json").is_file():
        raise ExportError(f"{model_dir}: not a Hugging Face model folder (no config.json)")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in [k for k in kinds if k in CONVERTER_TYPES]:
        convert(model_dir, kind, out_dir / gguf_name(kind))
        log(f"gguf: wrote {out_dir / gguf_name(kind)}")
        written.append(out_dir / gguf_name(kind))
    quantized = [k for k in kinds if k in QUANTIZER_TYPES]
    if quantized:
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".gguf-") as scratch:
            wide = next((p for p in written if p.name in (gguf_name("bf16"), gguf_name("f16"), gguf_name("f32"))),
                        None)
            if wide is None:
                wide = Path(scratch) / gguf_name("bf16")
                convert(model_dir, "bf16", wide)
            for kind in quantized:
                quantize(wide, kind, out_dir / gguf_name(kind))
                log(f"gguf: wrote {out_dir / gguf_name(kind)} (quantized from {wide.name})")
                written.append(out_dir / gguf_name(kind))
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m kubetune_fetch.export_gguf",
                                     description="GGUF files from a Hugging Face model folder, by llama.cpp's tools")
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="folder the .gguf files are written to")
    parser.add_argument("--type", dest="kinds", action="append", required=True, choices=TYPES)
    args = parser.parse_args(argv)
    try:
        export(args.model_dir, args.out, args.kinds)
    except ExportError as e:
        print(f"gguf export: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
