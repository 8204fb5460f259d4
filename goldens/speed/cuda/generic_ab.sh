#!/usr/bin/env bash
# On the GPU machine: the generic executor on CudaBackend (a package the fused decoder does not
# recognise: the standard-op export) for two engine builds, interleaved, and the golden's tokens.
#   goldens/speed/cuda/generic_ab.sh BASE_ENGINE NEW_ENGINE GGUF OUT_DIR
# Both engines are built with --features cuda; GGUF is the pinned SmolLM2 GGUF; SmolLM2's engine
# package must be in (or provisionable into) the engine's cache, for the tokenizer files.
set -euo pipefail
base=$(realpath "$1") new=$(realpath "$2") gguf=$(realpath "$3") out=$4
root=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
pkg=$(timeout 600 "$new" fetch smollm2 | head -1)
GOLDENS_SYSTEM_PYTHON=1 timeout 600 python3 "$root/goldens/export_standard_onnx.py" --gguf "$gguf" \
  --tokenizer-from "$pkg" --out "$out/std" > "$out/export.txt" 2>&1
golden=$root/goldens/smollm2-135m-instruct/capital_plain.json
ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' "$golden")
for name in base new; do
  timeout 600 "${!name}" profile --model "$out/std" --ep cuda --prompt-ids "$ids" --tokens 30 --runs 1 --json \
    > "$out/golden-$name.json" 2> "$out/golden-$name.err"
  python3 - "$out/golden-$name.json" "$golden" "$name" <<'PY' | tee -a "$out/summary.txt"
import json, sys
p, g = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
same = p["generated_ids"] == g["generated_ids"]
print(f"{sys.argv[3]}: capital_plain {'identical to' if same else 'DIFFERENT from'} the golden, "
      f"{p['median_tok_s']:.1f} tok/s, prefill {p['prefill_ms']:.1f} ms")
PY
done
timeout 900 python3 "$root/goldens/cuda_speed.py" --model "$out/std" --dtype f32 --contexts 8,256,8,256 \
  --tokens 64 --runs 3 --engine "base=$base" --engine "new=$new" --json "$out/speed.json" \
  2>&1 | tee "$out/speed.txt"
rm -rf "$out/std"
