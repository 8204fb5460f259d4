#!/usr/bin/env bash
# An interleaved A/B of two engine builds (first: one-row f32 MatMuls on cuBLAS's sgemv instead of
# its sgemm, rejected; then: the KV slide in one kernel launch instead of one per K and V)
# on the standard-op export (capital_plain, 30 tokens, CUDA graph, 1 warm-up + 3 runs per
# process, ABBA × 3), in two calls that follow each other while the machine stays warm:
#   ab.sh a   device-carry/d1: gguf.part.aa, engine_a.gz (without), engine_b.gz (with)
#   ab.sh b   device-carry/d2: gguf.part.ab, gguf-py.tgz, cuda_test.gz (the build with);
#                  tests/cuda.rs (goldens aside), the export, every short golden through it
#                  with build b, then the A/B
set -uo pipefail
W=/tmp/w; mkdir -p $W/bin $W/out
export ENGINE_CACHE_DIR=$W/cache
O=${OUT:-$W/out}
case "$1" in
a)
  cp device-carry/d1/gguf.part.aa $W/
  for f in device-carry/d1/*.gz; do gunzip -c "$f" > "$W/bin/$(basename "$f" .gz)"; done
  chmod +x $W/bin/*; ls $W/bin
  ;;
b)
  for f in device-carry/d2/*.gz; do gunzip -c "$f" > "$W/bin/$(basename "$f" .gz)"; done
  chmod +x $W/bin/*
  mkdir -p $W/cache/gguf $W/py
  cat $W/gguf.part.aa device-carry/d2/gguf.part.ab > $W/cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
  tar xzf device-carry/d2/gguf-py.tgz -C $W/py
  export PYTHONPATH=$W/py
  REQUIRE_CUDA=1 timeout 300 $W/bin/cuda_test --skip goldens_on_the_fused_decoder --test-threads 1 > $O/cuda-tests.txt 2>&1
  echo "tests/cuda.rs (goldens aside): rc=$?"; grep -E "^test |test result" $O/cuda-tests.txt
  pkg=$(timeout 300 $W/bin/engine_b fetch smollm2 | head -1)
  GOLDENS_SYSTEM_PYTHON=1 timeout 300 python3 goldens/export_standard_onnx.py --gguf $W/cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf --tokenizer-from "$pkg" --out $W/std 2>&1 | tail -1
  timeout 400 python3 goldens/check_generic_cuda.py --engine $W/bin/engine_b --model $W/std 2>&1 | tee $O/check-generic-std.txt
  ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' goldens/smollm2-135m-instruct/capital_plain.json)
  for r in 1 2 3; do for e in engine_a engine_b engine_b engine_a; do
    timeout 120 $W/bin/$e profile --model $W/std --ep cuda --prompt-ids "$ids" --tokens 30 --warmups 1 --runs 3 --json > $W/p.json 2>/dev/null
    python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(sys.argv[2], "%.1f"%p["median_tok_s"], p["cuda_graph"])' $W/p.json $e
  done; done | tee $O/abba.txt
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee $O/gpu.txt
  ;;
esac
