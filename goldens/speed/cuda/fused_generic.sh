#!/usr/bin/env bash
# On the GPU machine, in three calls that follow each other while the machine stays warm (each
# call carries at most 64 MiB, so the pinned GGUF travels in two halves):
#   fused_generic.sh a   device-carry/d1: gguf.part.aa, engine.gz (this build), engine_base.gz
#                        (the build before), fusion_test.gz; runs tests/fusion.rs on CudaBackend
#   fused_generic.sh b   device-carry/d2: gguf.part.ab, gguf-py.tgz, cuda_test.gz,
#                        differential_test.gz, engine_mid.gz (optional: a build between the two); the differential suite and tests/cuda.rs (goldens
#                        aside) on CUDA, then the generic executor A/B: base vs this build, the
#                        standard-op export and the converter's package (--generic), CUDA graph on
#                        and off, capital_plain, 30 tokens, 1 warm-up + 3 runs (the fused decoder
#                        once, for scale); every short golden through the export; a --trace
#   fused_generic.sh c   the goldens on the fused decoder, long_context.sh's rows, PyTorch anchors
#   fused_generic.sh c2  c right after a (device-carry/d2: gguf.part.ab, cuda_test.gz), no b
# Binaries are built on the dev machine with --features cuda, stripped and gzipped.
set -uo pipefail
W=/tmp/w; mkdir -p $W/bin $W/out
export ENGINE_CACHE_DIR=$W/cache
O=${OUT:-$W/out}
case "$1" in
a)
  cp device-carry/d1/gguf.part.aa $W/
  for f in device-carry/d1/*.gz; do gunzip -c "$f" > "$W/bin/$(basename "$f" .gz)"; done
  chmod +x $W/bin/*
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $O/gpu.txt
  ENGINE_TEST_BACKEND=cuda timeout 300 $W/bin/fusion_test --test-threads 1 2>&1 | tee $O/fusion-cuda.txt | tail -15
  ;;
b)
  for f in device-carry/d2/*.gz; do gunzip -c "$f" > "$W/bin/$(basename "$f" .gz)"; done
  chmod +x $W/bin/*
  mkdir -p $W/cache/gguf $W/py
  cat $W/gguf.part.aa device-carry/d2/gguf.part.ab > $W/cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
  tar xzf device-carry/d2/gguf-py.tgz -C $W/py
  export PYTHONPATH=$W/py
  (cd engine && ENGINE_TEST_BACKEND=cuda timeout 300 $W/bin/differential_test --test-threads 4) > $O/differential-cuda.txt 2>&1
  echo "differential on CUDA: rc=$?"; grep -E "test result|FAILED|panicked" $O/differential-cuda.txt | head
  E=$W/bin/engine; B=$W/bin/engine_base
  pkg=$(timeout 300 $E fetch smollm2 | head -1); echo "pkg $pkg"
  REQUIRE_CUDA=1 timeout 300 $W/bin/cuda_test --skip goldens_on_the_fused_decoder --test-threads 1 > $O/cuda-tests.txt 2>&1
  echo "tests/cuda.rs (goldens aside): rc=$?"; grep -E "^test |test result" $O/cuda-tests.txt
  GOLDENS_SYSTEM_PYTHON=1 timeout 300 python3 goldens/export_standard_onnx.py --gguf $W/cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf --tokenizer-from "$pkg" --out $W/std 2>&1 | tail -1
  golden=goldens/smollm2-135m-instruct/capital_plain.json
  ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' "$golden")
  want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generated_ids"])' "$golden")
  echo "golden $want"
  for spec in "std|$W/std" "generic|$pkg --generic" "fused|$pkg"; do
    label=${spec%%|*}; m=${spec#*|}
    for g in "" "--no-cuda-graph"; do
      for e in base $([ -x $W/bin/engine_mid ] && echo mid) new; do
        # The fused decoder is not what changed: one row of it, for scale.
        [ $label = fused ] && { [ $e != new ] || [ -n "$g" ]; } && continue
        bin=$E; [ $e = base ] && bin=$B; [ $e = mid ] && bin=$W/bin/engine_mid
        timeout 300 $bin profile --model $m $g --ep cuda --prompt-ids "$ids" --tokens 30 --warmups 1 --runs 3 --json > $W/out/p.json 2> $W/out/p.err
        rc=$?
        python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(sys.argv[3], "golden tokens" if p["generated_ids"]==eval(sys.argv[2]) else "TOKENS DIFFER", "tok/s %.1f"%p["median_tok_s"], p["cuda_graph"])' $W/out/p.json "$want" "$e rc=$rc $label $g" 2>&1 | tail -1
      done
    done
  done | tee $O/ab.txt
  timeout 400 python3 goldens/check_generic_cuda.py --engine $E --model $W/std 2>&1 | tee $O/check-generic-std.txt
  timeout 200 $E profile --model $W/std --ep cuda --prompt-ids "$ids" --tokens 64 --warmups 1 --runs 2 --trace > $O/trace-std.txt 2>&1
  tail -45 $O/trace-std.txt
  ;;
c2)
  # Phase c on a fresh lease after phase a: the GGUF's second half from device-carry/d2.
  for f in device-carry/d2/*.gz; do gunzip -c "$f" > "$W/bin/$(basename "$f" .gz)"; done
  chmod +x $W/bin/*
  mkdir -p $W/cache/gguf
  cat $W/gguf.part.aa device-carry/d2/gguf.part.ab > $W/cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
  bash "$0" c
  ;;
c)
  E=$W/bin/engine
  bash goldens/speed/cuda/long_context.sh $E $W/bin/cuda_test $O/long-context > $O/long-context.log 2>&1
  echo "long_context rc=$?"; cat $O/long-context/summary.txt
  timeout 300 python3 goldens/torch_anchors.py --dtype f16 > $O/torch-f16.txt 2>&1
  echo "anchors rc=$?"; tail -12 $O/torch-f16.txt
  ;;
esac
