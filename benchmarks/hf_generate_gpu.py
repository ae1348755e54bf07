"""Where HF generation spends its time on one GPU: plain HF ``generate`` on the bare model (the baseline) against
verl's HF rollout on the FSDP2-wrapped actor module (what rollout.name=hf runs), eagerly and with
rollout.enforce_eager=false (a static KV cache and a compiled decode step, CUDA graphs), on the same prompts, in one run:

    python benchmarks/hf_generate_gpu.py                       # the default model's shape, random weights
    python benchmarks/hf_generate_gpu.py --rows 128 --new 128 --profile out.txt

Both sample up to --new tokens for --rows left-padded prompts in bf16 (a random model seldom samples EOS, and the
batch runs until its last row stops, so all do --new decode steps). Prints tokens/s of each, the ratios rollout/plain
and static/plain, and the static path's first call (compile and capture) apart; with --profile, the
cProfile's table of the rollout's Python functions by own time (where the host's time goes), after the figures. Without CUDA
it prints why it skipped and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-config", default=None, help="folder with config.json (default: the default model's)")
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--prompt", type=int, default=96, help="prompt tokens (left-padded to --pad)")
    p.add_argument("--pad", type=int, default=256, help="prompt width, as rollout.prompt_length pads it")
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--profile", default=None, help="write the profiler table of one rollout generate here")
    p.add_argument("--cpu-smoke", action="store_true", help="run on this CPU with a tiny shape: checks the script")
    return p.parse_args(argv)


def _prompts(args, vocab: int, eos: int):
    import torch

    from verl.protocol import DataProto
    from verl.utils.torch_functional import compute_position_id_with_mask

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (args.rows, args.pad), generator=gen)
    mask = torch.zeros(args.rows, args.pad, dtype=torch.long)
    lengths = torch.randint(args.prompt // 2, args.prompt + 1, (args.rows,), generator=gen)
    for row, n in enumerate(lengths.tolist()):
        ids[row, : args.pad - n] = 0
        mask[row, args.pad - n :] = 1
    return DataProto.from_dict(tensors={"input_ids": ids, "attention_mask": mask,
                                        "position_ids": compute_position_id_with_mask(mask)},
                               meta_info={"eos_token_id": [eos], "pad_token_id": 0, "do_sample": True})


def _timed(fn, repeats: int) -> float:
    from verl.utils.device import get_torch_device

    sync = get_torch_device().synchronize
    fn()  # warm-up: kernels, allocator, cache shapes
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> int:
    args = _args(argv)
    import torch

    if args.cpu_smoke:
        args.rows, args.prompt, args.pad, args.new, args.repeats = 4, 6, 8, 4, 1
    elif not torch.cuda.is_available():
        print("hf_generate_gpu: skipped (torch sees no CUDA device); run it on a machine with a GPU")
        return 0
    from gpu_throughput import _join_single_rank
    from throughput import _actor
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    from verl.utils.default_model import default_model_path
    from verl.utils.device import get_default_device
    from verl.workers.config import RolloutConfig
    from verl.workers.rollout.hf_rollout import HFRollout
    from verl.workers.sharding_manager.fsdp_hf import FSDPHFShardingManager

    _join_single_rank()
    config = AutoConfig.from_pretrained(args.model_config or default_model_path())
    if args.cpu_smoke:
        config.num_hidden_layers, config.hidden_size, config.intermediate_size = 2, 64, 128
        config.num_attention_heads = config.num_key_value_heads = 2
        config.head_dim = 32
    device = get_default_device()
    folder = tempfile.mkdtemp(prefix="hf_generate_")
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    eos = int(config.eos_token_id if not isinstance(config.eos_token_id, list) else config.eos_token_id[0])
    data = _prompts(args, config.vocab_size, eos)
    tokens = args.rows * args.new

    plain = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to(device).eval()
    ids, mask = data.batch["input_ids"].to(device), data.batch["attention_mask"].to(device)
    plain_cfg = GenerationConfig(do_sample=True, max_new_tokens=args.new, pad_token_id=0, eos_token_id=eos,
                                 temperature=1.0, top_k=0, top_p=1.0)

    def run_plain():
        with torch.no_grad():
            plain.generate(input_ids=ids, attention_mask=mask, generation_config=plain_cfg)

    plain_s = _timed(run_plain, args.repeats)

    _, module, _ = _actor(folder, "bf16", {})
    rollout_cfg = RolloutConfig(name="hf", response_length=args.new, calculate_log_probs=True)
    rollout, manager = HFRollout(module, rollout_cfg), FSDPHFShardingManager(module)

    def run_rollout():
        with manager:
            out = rollout.generate_sequences(data)
        assert out.batch["responses"].shape == (args.rows, args.new)

    rollout_s = _timed(run_rollout, args.repeats)

    # rollout.enforce_eager=false: a static KV cache and the compiled decode step (CUDA graphs) on a replica
    static_cfg = RolloutConfig(name="hf", response_length=args.new, calculate_log_probs=True, enforce_eager=False)
    static = HFRollout(module, static_cfg, static_cache=True)

    def run_static():
        with manager:
            out = static.generate_sequences(data)
        assert out.batch["responses"].shape == (args.rows, args.new)

    start = time.perf_counter()
    run_static()  # compiles and captures: reported apart from the steady state
    first_static_s = time.perf_counter() - start
    static_s = _timed(run_static, args.repeats)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke run)"
    print(f"device: {name}; {args.rows} rows x {args.new} new tokens, prompts padded to "
          f"{args.pad}, bf16, sampled")
    print(f"plain_hf_generate_s: {plain_s:.3f}\nplain_tokens_per_s: {tokens / plain_s:.0f}")
    print(f"verl_hf_rollout_s: {rollout_s:.3f}\nrollout_tokens_per_s: {tokens / rollout_s:.0f}")
    print(f"ratio_rollout_over_plain: {rollout_s / plain_s:.3f}")
    compiled = static._decoder is not None and static._decoder.compiled
    print(f"static_cache_decoding: {static.static_cache_off or ('on, compiled' if compiled else 'on, not compiled')}")
    print(f"verl_hf_rollout_static_first_call_s: {first_static_s:.1f}")
    print(f"verl_hf_rollout_static_s: {static_s:.3f}\nstatic_tokens_per_s: {tokens / static_s:.0f}")
    print(f"ratio_static_over_plain: {static_s / plain_s:.3f}")
    if args.profile:
        import cProfile
        import io
        import pstats

        python = cProfile.Profile()
        python.runcall(run_rollout)
        stream = io.StringIO()
        pstats.Stats(python, stream=stream).sort_stats("tottime").print_stats(40)
        Path(args.profile).write_text("Python functions by own time (cProfile):\n" + stream.getvalue())
        print(stream.getvalue()[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
