"""How fast `python -m verl.trainer.main_ppo` refuses each key issue 17 found silently ignored.

For each key: the exit code (2 expected) and the seconds until the process exits, and the ratio to
`python -c pass` measured in the same run on the same machine (the interpreter's own start-up), so the
figure says how much the config check adds rather than how fast this machine is.

    python benchmarks/config_refusal_latency.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

FORMERLY_SILENT = [
    # issue 19 built these three; alone they are still incomplete and exit 2 through the cross-key checks
    # (filter_groups.metric unset, gen_batch_size without dynamic sampling, reward_model.model.path unset)
    "algorithm.filter_groups.enable=true",
    "data.gen_batch_size=16",
    "reward_model.enable=true",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
    "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=true",
    "actor_rollout_ref.rollout.multi_turn.format=llama3_json",
    "actor_rollout_ref.rollout.agent.custom_async_server.path=my.server",
    "actor_rollout_ref.actor.use_torch_compile=true",
    "trainer.profile_steps=[1]",
    "actor_rollout_ref.actor.fsdp_config.fsdp_size=1",
    "actor_rollout_ref.rollout.name=sglang",
    "trainer.logger=[console,swanlab]",
    "trainer.logger=[console,clearml]",
    "trainer.logger=[console,vemlp_wandb]",
]


def _timed(args: list[str], cwd: str) -> tuple[int, float, str]:
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    return proc.returncode, time.perf_counter() - start, proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per key; the median is reported")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        base = statistics.median(_timed([sys.executable, "-c", "pass"], cwd)[1] for _ in range(args.repeats))
        print(f"python -c pass: {base:.3f} s (median of {args.repeats})")
        print(f"{'override':<58} {'exit':>4} {'seconds':>8} {'x pass':>7}  named")
        for override in FORMERLY_SILENT:
            runs = [
                _timed([sys.executable, "-m", "verl.trainer.main_ppo", f"hydra.run.dir={cwd}/hydra", override], cwd)
                for _ in range(args.repeats)
            ]
            seconds = statistics.median(r[1] for r in runs)
            code, stderr = runs[-1][0], runs[-1][2]
            named = override.split("=", 1)[0] in stderr
            print(f"{override:<58} {code:>4} {seconds:>8.3f} {seconds / base:>7.1f}  {'yes' if named else 'NO'}")


if __name__ == "__main__":
    main()
