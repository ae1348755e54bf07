"""A GRPO step with images against a text-only step of the same language model, both measured in this run:

    flock /tmp/heavy.lock .venv/bin/python benchmarks/vlm_step.py [--steps 6] [--family qwen2_5_vl] [--rollout hf]

The model is the tests' tiny random Qwen-VL (tests/helpers/tiny_vlm.py: a 2-layer language model, a 1-block vision
tower, a PIL image processor with 4-pixel patches; with --rollout vllm, its variant with head size 32, which vLLM's
CPU attention needs). No package registry here ships a small VLM's weights, so this
measures the plumbing's cost (processor, pixel values through the batch, the vision tower in the rollout and the
actor, 3-D rope positions), not a real model's.

Both runs use the demo's shape (scripts/demo.sh: 8 prompts x 4 responses, prompts up to 256 tokens, responses up
to 48, the HF rollout's agent loop, one worker) on the bundled visual_count rows: once as generated (one 84x84
image per prompt), once with the `<image>` placeholder and the image column removed (the same question as text).
Prints the median step time of steps 2..N (step 1 warms up) of each, and the ratio images / text.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _data(out: Path) -> tuple[Path, Path]:
    """visual_count rows (images) and the same rows as text only."""
    import pyarrow.parquet as pq

    images = out / "images"
    subprocess.run([sys.executable, str(REPO / "examples/data_preprocess/visual_count.py"), "--local_save_dir",
                    str(images), "--train_size", "64", "--test_size", "8"], check=True, capture_output=True)
    text = out / "text"
    text.mkdir()
    for split in ("train", "test"):
        table = pq.read_table(images / f"{split}.parquet").to_pylist()
        for row in table:
            row.pop("images")
            for message in row["prompt"]:
                message["content"] = message["content"].replace("<image>", "")
        import pyarrow as pa

        pq.write_table(pa.Table.from_pylist(table), text / f"{split}.parquet")
    return images, text


def _step_times(model_dir: Path, data_dir: Path, run_dir: Path, steps: int, rollout: str) -> list[float]:
    from tests.helpers.e2e import fit_run

    arr = "actor_rollout_ref"
    rows = fit_run([
        f"data.train_files={data_dir / 'train.parquet'}", f"data.val_files={data_dir / 'test.parquet'}",
        "algorithm.adv_estimator=grpo", "data.train_batch_size=8", "data.max_prompt_length=256",
        "data.max_response_length=48", f"{arr}.model.path={model_dir}", f"{arr}.rollout.name={rollout}",
        f"{arr}.rollout.n=4", f"{arr}.actor.ppo_mini_batch_size=8", f"{arr}.actor.ppo_micro_batch_size_per_gpu=8",
        f"{arr}.rollout.log_prob_micro_batch_size_per_gpu=32", f"{arr}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "trainer.n_gpus_per_node=1", "trainer.device=cpu", f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.logger=[]",
        f"trainer.default_local_dir={run_dir}", "ray_kwargs.ray_init.num_cpus=4",
        *((f"{arr}.rollout.dtype=float32", f"{arr}.rollout.max_num_seqs=32") if rollout == "vllm" else ())])
    return [row["timing_s/step"] for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rollout", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--family", choices=["qwen2_vl", "qwen2_5_vl"], default="qwen2_5_vl")
    args = parser.parse_args()
    from tests.helpers.tiny_vlm import save_tiny_vlm_dir
    from tests.helpers.tiny_vlm_vllm import save_tiny_vllm_vlm_dir

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        save = save_tiny_vllm_vlm_dir if args.rollout == "vllm" else save_tiny_vlm_dir
        model_dir = Path(save(tmp / "model", args.family))
        images, text = _data(tmp / "data")
        results = {}
        for name, data_dir in (("text", text), ("images", images)):
            times = _step_times(model_dir, data_dir, tmp / f"run_{name}", args.steps, args.rollout)
            results[name] = statistics.median(times[1:])
            print(f"[vlm_step] {name}: step times {', '.join(f'{t:.2f}' for t in times)} s; "
                  f"median of steps 2..{args.steps}: {results[name]:.2f} s", flush=True)
    print(f"[vlm_step] tiny {args.family}, {args.rollout} rollout, demo shape: images {results['images']:.2f} s/step, text "
          f"{results['text']:.2f} s/step, ratio images / text = {results['images'] / results['text']:.2f}")


if __name__ == "__main__":
    main()
