#!/usr/bin/env bash
# The GPU checks in one go, on a box set up as ../shared/gpu/README.md says (run from the unpacked project):
#   bash scripts/gpu_check.sh LOG_DIR [MODEL_CONFIG_DIR]
# gpu tests, the whole-step benchmark (rollout.enforce_eager=false: static KV cache and CUDA graphs), HF generation
# against plain HF (eager and static; PROFILE=1 adds a profile of the eager rollout), and the actor update's
# throughput on the default model's shape and on a ~1B Llama. Each step has its own time cap, so one that hangs
# costs only its cap; every log lands in LOG_DIR and the figures are printed last. STEPS picks steps by name
# (default: all of tests gpu_e2e hf_generate throughput_135m throughput_1b; also offload_loop: the
# activation-offload test OFFLOAD_RUNS more times, whole tracebacks kept). GPU_E2E_STEPS sets gpu_e2e's --steps.
set -uo pipefail
out=${1:?usage: gpu_check.sh LOG_DIR [MODEL_CONFIG_DIR]}
model=${2:-}
mkdir -p "$out"
py=${PYTHON:-python3}
steps=" ${STEPS:-tests gpu_e2e hf_generate throughput_135m throughput_1b} "
step() {  # step NAME CAP_SECONDS COMMAND...
  local name=$1 cap=$2; shift 2
  [[ "$steps" == *" $name "* ]] || return 0
  local t0=$SECONDS
  timeout "$cap" "$@" > "$out/$name.log" 2>&1
  echo "[gpu_check] $name: exit $? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
$py -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" >> "$out/gpu.txt" 2>&1
echo "C compiler for inductor: $(command -v gcc || command -v cc || echo none)" >> "$out/gpu.txt"
cfg=(); [ -n "$model" ] && cfg=(--model-config "$model")
prof=(); [ "${PROFILE:-0}" = 1 ] && prof=(--profile "$out/hf_generate_profile.txt")
step tests 360 $py -m pytest -m gpu tests/gpu -p no:cacheprovider -o addopts="" -v -rA
step offload_loop 110 bash -c "for i in \$(seq ${OFFLOAD_RUNS:-5}); do $py -m pytest -m gpu \
  tests/gpu/test_activation_offload_gpu.py -p no:cacheprovider -o addopts='' -v --tb=long -rA; done"
step gpu_e2e 180 $py benchmarks/gpu_e2e.py --steps ${GPU_E2E_STEPS:-5} --warmup 2 --out /tmp/gpu_e2e "${cfg[@]}" \
  actor_rollout_ref.rollout.enforce_eager=false
step hf_generate 120 $py benchmarks/hf_generate_gpu.py --repeats 1 "${prof[@]}" "${cfg[@]}"
layers=$($py -c "import json,sys; print(json.load(open(sys.argv[1]+'/config.json'))['num_hidden_layers'])" "${model:-/tmp/gpu_e2e/model}" 2>/dev/null || echo 30)
step throughput_135m 50 $py benchmarks/gpu_throughput.py --model /tmp/gpu_e2e/model --responses 128 \
  --min-prompt-length 100 --max-prompt-length 160 --min-response-length 128 --max-response-length 128
step throughput_1b 100 $py benchmarks/gpu_throughput.py --hidden 2048 --layers 16 --heads 16 --responses 64
cp /tmp/gpu_e2e/main_ppo.log "$out/gpu_e2e_main_ppo.log" 2>/dev/null
cat "$out/gpu.txt"
grep -E "PASSED|FAILED|ERROR" "$out/tests.log" | grep "::" | sort | uniq | tail -n 20
tail -n 3 "$out/tests.log"
[ -f "$out/offload_loop.log" ] && { echo "== offload_loop"; grep -E "passed|failed" "$out/offload_loop.log" | grep "=="; }
echo "== static decoding in the gpu_e2e run:"; grep -hoE "hf rollout: (decoding with a static KV cache[^(]*|static-cache decoding is off.{0,300})" "$out/gpu_e2e_main_ppo.log" 2>/dev/null | sort | uniq -c | head -3
for f in gpu_e2e hf_generate throughput_135m throughput_1b; do
  [ -f "$out/$f.log" ] && { echo "== $f"; tail -n 16 "$out/$f.log"; }
done
cat "$out/summary.txt"
