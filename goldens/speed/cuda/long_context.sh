#!/usr/bin/env bash
# On the GPU machine: the long-context goldens through the fused CUDA decoder, and their speed.
#   goldens/speed/cuda/long_context.sh ENGINE CUDA_TEST_BIN OUT_DIR
# ENGINE and CUDA_TEST_BIN (the `engine/tests/cuda.rs` binary) are built with `--features cuda`;
# SmolLM2 must be in the engine's cache or provisionable there (`engine fetch smollm2`). Writes:
# goldens-cuda.txt (every golden, graphs on and off, f32 must be identical; f16 reported),
# profile-<dtype>-<case>.json (`engine profile --ep cuda`, 128 new tokens, the golden's prompt
# ids) and summary.txt (prefill, decode step, whether the first tokens equal the golden's).
set -euo pipefail
engine=$(realpath "$1") cudatest=$(realpath "$2") out=$3
root=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
models=$(dirname "$(timeout 600 "$engine" fetch smollm2 | head -1)")
echo "models in $models" | tee "$out/summary.txt"
REQUIRE_CUDA=1 timeout 900 "$cudatest" goldens_on_the_fused_decoder --nocapture --test-threads 1 \
  > "$out/goldens-cuda.txt" 2>&1 && echo "goldens on CUDA: passed" | tee -a "$out/summary.txt" \
  || { echo "goldens on CUDA: FAILED" | tee -a "$out/summary.txt"; tail -30 "$out/goldens-cuda.txt"; }
for dtype in f32 f16; do
  model=$models/smollm2-135m-instruct; [ "$dtype" = f16 ] && model=$model-f16
  # prompt256: the first 256 prompt tokens of context1k_plain (a prefill row; no golden).
  for case in capital_plain prompt256 context1k_plain context4k_plain; do
    src=$case n=0; [ "$case" = prompt256 ] && src=context1k_plain n=256
    golden=$root/goldens/smollm2-135m-instruct/$src.json
    ids=$(python3 -c 'import json,sys; i=json.load(open(sys.argv[1]))["prompt_ids"]; n=int(sys.argv[2]); print(",".join(map(str, i[:n] if n else i)))' "$golden" "$n")
    timeout 600 "$engine" profile --model "$model" --ep cuda --prompt-ids "$ids" --tokens 128 \
      --warmups 1 --runs 3 --json > "$out/profile-$dtype-$case.json"
    python3 - "$out/profile-$dtype-$case.json" "$golden" "$dtype $case" "$n" <<'PY' | tee -a "$out/summary.txt"
import json, sys
p, g = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
# A cut prompt has no golden continuation: compare nothing.
want = g["generated_ids"] if sys.argv[4] == "0" else []
same = p["generated_ids"][:len(want)] == want
print(f"{sys.argv[3]}: {len(p['prompt_ids'])} prompt tokens, prefill {p['prefill_ms']:.2f} ms, "
      f"decode {p['median_ms_per_step']:.3f} ms/step ({p['median_tok_s']:.0f} tok/s), "
      f"first {len(want)} tokens {'identical to' if same else 'DIFFERENT from'} the golden, graph {p['cuda_graph']}")
PY
  done
done
