#!/usr/bin/env bash
# On the GPU machine: the standard-op export and the converter's package (--generic) through the
# generic executor on CudaBackend, CUDA graph on and off, against the capital_plain golden; then a
# --trace of the captured step. Expects /tmp/w/gguf.part.aa and device-carry/c2/{gguf.part.ab,engine,gguf-py.tgz}
# (the pinned GGUF split in two, since one call carries at most 64 MiB).
set -uo pipefail
R=$PWD; W=/tmp/w; mkdir -p $W/out
export ENGINE_CACHE_DIR=$W/cache
mkdir -p $W/cache/gguf
cat $W/gguf.part.aa device-carry/c2/gguf.part.ab > $W/cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p $W/py && tar xzf device-carry/c2/gguf-py.tgz -C $W/py
export PYTHONPATH=$W/py
E=device-carry/c2/engine
pkg=$(timeout 300 $E fetch smollm2 | head -1); echo "pkg $pkg"
GOLDENS_SYSTEM_PYTHON=1 timeout 300 python3 goldens/export_standard_onnx.py --gguf $W/cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf --tokenizer-from "$pkg" --out $W/std 2>&1 | tail -1
golden=goldens/smollm2-135m-instruct/capital_plain.json
ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' "$golden")
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generated_ids"])' "$golden")
echo "golden $want"
for m in "$W/std" "$pkg --generic" "$pkg"; do
  for g in "" "--no-cuda-graph"; do
    timeout 300 $E profile --model $m $g --ep cuda --prompt-ids "$ids" --tokens 30 --warmups 1 --runs 3 --json > $W/out/p.json 2> $W/out/p.err
    echo "rc=$? $m $g"; tail -2 $W/out/p.err
    python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(p["generated_ids"]==eval(sys.argv[2]), "tok/s %.1f prefill %.1f"%(p["median_tok_s"],p["prefill_ms"]), p["cuda_graph"])' $W/out/p.json "$want"
  done
done
timeout 200 $E profile --model $W/std --ep cuda --prompt-ids "$ids" --tokens 64 --warmups 1 --runs 2 --trace 2>&1 | tail -60
