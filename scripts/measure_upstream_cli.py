"""How many of upstream verl's example command lines pass our pre-Ray config check.

    .venv/bin/python scripts/measure_upstream_cli.py /tmp/upstream_cli [--show accepted,gpu_only,other,invalid]

The folder holds upstream's example scripts (`*.sh`, any depth; fetched by hand, never kept in this repo). Each
`python -m verl.trainer.main_ppo` invocation in them becomes one command line: backslash continuations are joined,
literal `NAME=value` assignments made earlier in the script are expanded (`$NAME`, `${NAME}`, `${NAME:-default}`,
`$((arithmetic))`, simple bash arrays), redirects, pipes and `$@` are dropped. `$(pwd)` / `$PWD` stand for the
folder (upstream's scripts run from the repository root), `$HOME` for /root.

A value still holding an unresolved shell variable or command substitution gets our default for that key as a
neutral stand-in (the line is "invalid" when the key has no default); the data files are swapped for a tiny local
parquet and the model paths for the bundled default model, nothing else is changed. Each line then goes through
what `python -m verl.trainer.main_ppo` runs before Ray: the alias rewrite and unknown-key check, Hydra composition
(with the line's own `--config-path`/`--config-name`, after `gpu_only_config_problem`), and `validate_config`
(files checked). The device check is left out: it judges this machine, not the command line.

Each line is classified: accepted; refused only for a GPU-only engine (Megatron, SGLang, TRT-LLM, NPU, fused
kernels, liger, multi-GPU expert parallelism, judged by the refusal message); refused for another reason (the keys
named by those messages are counted); invalid (not a usable command line, with the reason).

With `--upstream-config FILE` (upstream's flat `_generated_ppo_trainer.yaml` of the version to judge against,
fetched by hand), a valid line is also marked *stale* when it sets, without `+`, a key that this upstream config
does not have either (nor the line's own --config-name yaml): upstream's own Hydra refuses such a line ("Key ... is
not in struct"), or a value upstream's own code refuses (a reward manager its registry lacks, a tool config file
without its `tools:` list). A second figure is then printed over the lines that upstream of that version would run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

from upstream_cli_shell import CONFIG_FLAGS, MODULE, UNRESOLVED, CommandLine, extract, unresolved_names

REPO = Path(__file__).resolve().parent.parent
DATA_KEYS = ("data.train_files", "data.val_files")
MODEL_KEY_ENDINGS = ("model.path", "model.tokenizer_path", "model.input_tokenizer")
GPU_ONLY = re.compile(
    r"megatron|mcore|\bsglang|tensorrt|trt-?llm|\bnpu\b|ascend|fused[ _]kernels?|liger|expert[ _]parallel",
    re.IGNORECASE,
)
# stand-ins where our default would not be neutral, for an unresolved value or a key the line leaves unset:
# upstream's scripts are written for its defaults, one node of 8 GPUs
NEUTRAL = {"trainer.n_gpus_per_node": 8, "trainer.nnodes": 1}
MISSING_FILE = re.compile(r"not found: '|does not exist|no such file", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------- the check


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _default_of(defaults, key: str):
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(defaults, key, throw_on_missing=False, throw_on_resolution_failure=False)
    except Exception:  # an interpolation that needs a resolver's input
        return None


def prepare(cmd: CommandLine, defaults, parquet: str, model: str, root: Path) -> None:
    """Swap data and model paths, stand in for unresolved values, resolve --config-path; or mark invalid."""
    if cmd.invalid:
        return
    fixed = []
    for override in cmd.overrides:
        if "=" not in override and not override.startswith("~"):
            cmd.invalid = f"word {override!r} is not a key=value override (broken quoting or continuation)"
            return
        prefix = override[: len(override) - len(override.lstrip("+~"))]
        key, value = _key(override), override.split("=", 1)[1]
        if UNRESOLVED in key:
            cmd.invalid = f"override key built from {', '.join(unresolved_names(key))}"
            return
        if key in DATA_KEYS:
            value = parquet
        elif key.endswith(MODEL_KEY_ENDINGS):
            value = model
        elif UNRESOLVED in value:
            names = ", ".join(unresolved_names(value))
            default = NEUTRAL.get(key, _default_of(defaults, key))
            if default is None or not isinstance(default, (bool, int, float, str)):
                cmd.invalid = f"{key} takes {names}, unresolved, and has no default to stand in"
                return
            value = str(default).lower() if isinstance(default, bool) else str(default)
            cmd.notes.append(f"{key}: {names} unresolved, our default {value!r} stands in")
        fixed.append(f"{prefix}{key}={value}")
    written = {_key(o) for o in fixed}
    for key, value in NEUTRAL.items():
        if key not in written:  # the line relies on upstream's default (one node of 8 GPUs), not on ours (a CPU box)
            fixed.append(f"{key}={value}")
            cmd.notes.append(f"{key} not set: upstream's default {value} stands in")
    cmd.overrides = fixed
    flags = []
    for flag in cmd.flags:
        name, _, value = flag.partition("=")
        if UNRESOLVED in value:
            cmd.invalid = f"{name} takes {', '.join(unresolved_names(value))}, unresolved"
            return
        flags.append(f"{name}={value}")
    cmd.flags = flags


def _config_of(flags: list[str]) -> tuple[str | None, str | None]:
    path = name = None
    for flag in flags:
        key, _, value = flag.partition("=")
        if CONFIG_FLAGS[key] == "path":
            path = value
        else:
            name = value[: -len(".yaml")] if value.endswith(".yaml") else value
    return path, name


def compose(cmd: CommandLine, root: Path):
    """The composed DictConfig, as main_ppo's Hydra main would receive it; raises ConfigError for key problems."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from verl.trainer.config import ConfigError, load_config, unknown_override_problems
    from verl.trainer.config.aliases import rewrite_aliases
    from verl.trainer.config.config_names import gpu_only_config_problem

    refusal = gpu_only_config_problem(cmd.flags, cwd=root)
    if refusal is not None:
        raise ConfigError([refusal])
    path, name = _config_of(cmd.flags)
    name = name or "ppo_trainer"
    config_dir = REPO / "verl" / "trainer" / "config"
    # Hydra reads a relative --config-path from the entry point's folder (verl/trainer); upstream's scripts mean
    # their repository root, which the folder of scripts stands for
    folders = [config_dir] if not path else [Path(path)] if os.path.isabs(path) else [
        root / path, config_dir.parent / path]
    if path and os.path.isabs(path) and "/examples/" in path:
        # someone's own checkout of upstream (/home/me/verl/examples/...): the fetched folder stands for it
        folders.append(root / ("examples/" + path.rsplit("/examples/", 1)[1]))
    folder = next((f for f in folders if (f / f"{name}.yaml").is_file()), None)
    if folder is None:
        raise FileNotFoundError(f"--config-name={name}: no {name}.yaml in {', '.join(map(str, folders))}")
    if folder.resolve() == config_dir.resolve():
        return load_config(cmd.overrides, config_name=name)
    overrides = rewrite_aliases(cmd.overrides)
    problems = unknown_override_problems(overrides)
    if problems:
        raise ConfigError(problems)
    with initialize_config_dir(config_dir=str(folder.resolve()), version_base=None):
        return hydra_compose(config_name=name, overrides=list(overrides))


def _problem_key(message: str) -> str:
    for pattern in (r"^Unknown config key '([^']+)'", r"^'([^']+)' is not in the default config",
                    r"^(?:--config-name=\S+)", r"^([+~]*[A-Za-z_][\w.\[\]]*)\s*(?:=|:|\(| is| and| must| has)",
                    r"[Kk]ey '([^']+)'", r"'([a-z_]+\.[\w.]+)'"):
        match = re.search(pattern, message)
        if match:
            key = match.group(1) if match.groups() else match.group(0)
            return re.sub(r"\[\d+\]", "", key.lstrip("+~"))
    return message.split(":", 1)[0][:60]


def is_gpu_only(message: str) -> bool:
    """A refusal for a GPU-only engine: judged by the reason, the first sentence (what the key asks for)."""
    head = re.split(r"(?<=[.;])\s", message, maxsplit=1)[0]
    return bool(GPU_ONLY.search(head))


def check(cmd: CommandLine, root: Path) -> None:
    from verl.trainer.config import ConfigError, ConfigWarning, validate_config

    if cmd.invalid:
        cmd.status = "invalid"
        return
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore", ConfigWarning)
            cfg = compose(cmd, root)
            validate_config(cfg, check_files=True)
        cmd.status = "accepted"
        return
    except ConfigError as err:
        cmd.problems = list(err.problems)
    except Exception as err:  # Hydra's own composition errors: what the command line would print too
        message = " ".join(str(err).split())
        if type(err).__name__ in {"OverrideParseException", "MissingConfigException"} or isinstance(
                err, FileNotFoundError):
            # upstream's own Hydra would not parse this line either, or it names a config file not in the folder
            cmd.status, cmd.invalid = "invalid", f"{type(err).__name__}: {message[:160]}"
            return
        cmd.problems = [f"{type(err).__name__}: {message}"]
    other = [p for p in cmd.problems if not is_gpu_only(p)]
    cmd.status = "other" if other else "gpu_only"
    cmd.missing_files_only = bool(other) and all(MISSING_FILE.search(p) for p in other)
    cmd.other_keys = sorted({_problem_key(p.split(": ", 1)[1] if p.split(":", 1)[0].endswith(("Exception", "Error"))
                                          else p) for p in other})


# ---------------------------------------------------------------------------------------------- stale lines


def _flat_keys(node, prefix: str = "") -> tuple[set[str], set[str]]:
    """(every dotted key, leaf or section; the sections that are empty mappings, which take any key)."""
    keys, free = set(), set()
    if isinstance(node, dict):
        if not node and prefix:
            free.add(prefix)
        for key, value in node.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            keys.add(dotted)
            sub_keys, sub_free = _flat_keys(value, dotted)
            keys |= sub_keys
            free |= sub_free
    return keys, free


def _yaml_keys(path: Path) -> tuple[set[str], set[str]]:
    import yaml

    try:
        return _flat_keys(yaml.safe_load(path.read_text()) or {})
    except (OSError, yaml.YAMLError):
        return set(), set()


def _typed_section(key: str, upstream_keys: set[str]) -> bool:
    """Whether `key` lies in a section upstream instantiates as a dataclass (it has `_target_`): an extra key there
    fails upstream's config classes even when a yaml file adds it."""
    parts = key.split(".")
    return any(".".join(parts[:i] + ["_target_"]) in upstream_keys for i in range(1, len(parts)))


# upstream's reward-manager registry (verl/workers/reward_manager/__init__.py registers these; any other name stops
# upstream's trainer with "Unknown reward manager")
UPSTREAM_REWARD_MANAGERS = {"naive", "prime", "batch", "dapo"}
REWARD_MANAGER_KEYS = ("reward_model.reward_manager", "reward.reward_manager.name")
TOOL_CONFIG_KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"


def stale_values(cmd: CommandLine) -> list[str]:
    """Values upstream's own code refuses: a reward manager its registry lacks, a tool config without the `tools:`
    list its tool loader reads (an MCP servers file given in its place, say)."""
    import yaml

    stale = []
    for override in cmd.overrides:
        if "=" not in override:
            continue
        key, value = _key(override), override.split("=", 1)[1].strip("'\"")
        if key in REWARD_MANAGER_KEYS and value not in UPSTREAM_REWARD_MANAGERS:
            stale.append(f"{key}={value} (upstream's reward-manager registry has no {value!r})")
        elif key == TOOL_CONFIG_KEY and value and os.path.isfile(value):
            try:
                loaded = yaml.safe_load(Path(value).read_text())
            except (OSError, yaml.YAMLError):
                continue
            if not (isinstance(loaded, dict) and "tools" in loaded):
                stale.append(f"{key}={Path(value).name} (upstream's tool loader reads a `tools:` list it lacks)")
    return stale


def stale_keys(cmd: CommandLine, upstream: tuple[set[str], set[str]], root: Path) -> list[str]:
    """The keys the line sets without `+` that neither upstream's config nor the line's own yaml declares, the
    keys its own yaml adds inside sections upstream's config classes check, and the values upstream's own code refuses
    (stale_values)."""
    keys, free = set(upstream[0]), set(upstream[1])
    stale = stale_values(cmd)
    path, name = _config_of(cmd.flags)
    if name and name != "ppo_trainer":
        found = [f for folder in ([root / path, root] if path and not os.path.isabs(path) else [root])
                 for f in folder.rglob(f"{name}.yaml")]
        if not found:
            return stale  # another of upstream's own configs (ppo_megatron_trainer, ...): its key set is not at hand
        for own in found:
            own_keys, own_free = _yaml_keys(own)
            for key in sorted(own_keys - keys):
                if key.startswith(("hydra", "defaults")) or any(key.startswith(f + ".") for f in free):
                    continue
                if _typed_section(key, upstream[0]):
                    stale.append(f"{key} (in {own.name})")
                else:
                    keys.add(key)
            free |= own_free
    for override in cmd.overrides:
        if "=" not in override or override.startswith(("~", "++")):
            continue
        key = re.sub(r"\[\d+\]", "", _key(override))
        if override.startswith("+"):
            if key in upstream[0]:  # Hydra: "Could not append to config. An item is already at ..."
                stale.append(f"+{key} (upstream's config has it: an append is refused)")
            continue
        if key in keys or any(key.startswith(f + ".") for f in free):
            continue
        stale.append(key)
    return stale


# ---------------------------------------------------------------------------------------------- main


def tiny_parquet(folder: Path) -> str:
    sys.path.insert(0, str(REPO))
    from tests.data.conftest import make_row, write_rows

    rows = [make_row(f"Tom has {i} apples. How many?", index=i, truth=str(i)) for i in range(8)]
    return write_rows(folder / "tiny.parquet", rows)


def default_model() -> str:
    from verl.utils.default_model import default_model_path

    with contextlib.redirect_stdout(io.StringIO()):
        return default_model_path()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("folder", type=Path, help="upstream's example scripts (*.sh, any depth)")
    parser.add_argument("--show", default="other,invalid",
                        help="classes whose lines are listed with their messages (accepted,gpu_only,other,invalid)")
    parser.add_argument("--model", help="model folder to point model paths at (default: the bundled default model)")
    parser.add_argument("--upstream-config", type=Path,
                        help="upstream's flat _generated_ppo_trainer.yaml: also count the lines it refuses (stale)")
    args = parser.parse_args(argv)
    root = args.folder.resolve()
    os.chdir(REPO)  # user yamls' hydra.searchpath file://verl/trainer/config is read from the working directory

    scripts = sorted(root.rglob("*.sh"))
    lines: list[CommandLine] = []
    with_module = 0
    for script in scripts:
        found = extract(script, root)
        with_module += bool(found)
        lines += found

    from verl.trainer.config import load_config

    defaults = load_config([])
    model = args.model or default_model()
    with tempfile.TemporaryDirectory() as tmp:
        parquet = tiny_parquet(Path(tmp))
        for cmd in lines:
            prepare(cmd, defaults, parquet, model, root)
            check(cmd, root)

    stale: dict[str, list[str]] = {}
    if args.upstream_config:
        upstream = _yaml_keys(args.upstream_config)
        if not upstream[0]:
            parser.error(f"--upstream-config {args.upstream_config}: no keys read")
        stale = {cmd.name: found for cmd in lines if cmd.status != "invalid"
                 for found in [stale_keys(cmd, upstream, root)] if found}

    counts = Counter(cmd.status for cmd in lines)
    valid = len(lines) - counts["invalid"]
    show = set(args.show.split(","))
    for cmd in lines:
        if cmd.status not in show:
            continue
        print(f"[{cmd.status}] {cmd.name}" + (f": {cmd.invalid}" if cmd.invalid else ""))
        for problem in cmd.problems:
            tag = "gpu" if is_gpu_only(problem) else "OTHER"
            print(f"    {tag}: {problem[:300]}")
        for note in cmd.notes:
            print(f"    note: {note}")

    print(f"\nscripts: {len(scripts)}, with a {MODULE} invocation: {with_module}, command lines: {len(lines)}")
    print(f"{'class':<12}{'lines':>6}")
    for status in ("accepted", "gpu_only", "other", "invalid"):
        print(f"{status:<12}{counts[status]:>6}")
    print(f"{'valid':<12}{valid:>6}")
    ok = counts["accepted"] + counts["gpu_only"]
    if valid:
        print(f"\n(accepted + gpu_only) / valid = {ok}/{valid} = {ok / valid:.1%}")
    if args.upstream_config:
        current = [cmd for cmd in lines if cmd.status != "invalid" and cmd.name not in stale]
        ok_current = sum(cmd.status in ("accepted", "gpu_only") for cmd in current)
        print(f"\nstale (upstream's {args.upstream_config.name} refuses a key the line sets): {len(stale)} lines, "
              f"of which we accept or refuse only for a GPU engine "
              f"{sum(cmd.status in ('accepted', 'gpu_only') for cmd in lines if cmd.name in stale)}")
        if current:
            print(f"over the {len(current)} lines that upstream's config runs: (accepted + gpu_only) = "
                  f"{ok_current}/{len(current)} = {ok_current / len(current):.1%}")
        stale_counts = Counter(key for found in stale.values() for key in found)
        print("keys making lines stale (lines naming each):")
        for key, n in stale_counts.most_common():
            print(f"{n:>5}  {key}")
        for cmd in current:
            if cmd.status == "other" and "other" in show:
                print(f"  still refused, not stale: {cmd.name}: {'; '.join(p[:160] for p in cmd.problems)}")
    missing = sum(cmd.missing_files_only for cmd in lines)
    if missing:
        print(f"of the 'other' lines, {missing} are refused only for a file (reward function, dataset class, tool "
              f"config) that is not in the fetched folder")
    folders: dict[str, Counter] = {}
    for cmd in lines:
        parts = Path(cmd.script).parts
        folder = "/".join(parts[:2]) if parts[0] == "examples" and len(parts) > 2 else parts[0]
        folders.setdefault(folder, Counter())[cmd.status] += 1
    print(f"\n{'folder':<44}{'accepted':>9}{'gpu_only':>9}{'other':>7}{'invalid':>8}")
    for folder, count in sorted(folders.items()):
        print(f"{folder:<44}{count['accepted']:>9}{count['gpu_only']:>9}{count['other']:>7}{count['invalid']:>8}")
    keys = Counter(key for cmd in lines for key in cmd.other_keys)
    examples: dict[str, str] = {}
    for cmd in lines:
        for problem in cmd.problems:
            if not is_gpu_only(problem):
                examples.setdefault(_problem_key(problem.split(": ", 1)[1] if problem.split(":", 1)[0].endswith(
                    ("Exception", "Error")) else problem), f"{cmd.name}: {problem[:220]}")
    if keys:
        print("\nkeys behind the 'other' refusals (lines naming each, with one message):")
        for key, n in keys.most_common():
            print(f"{n:>5}  {key}\n         e.g. {examples.get(key, '')}")
    reasons = Counter(re.sub(r"\$\S+|'[^']*'", "…", cmd.invalid or "") for cmd in lines if cmd.invalid)
    if reasons:
        print("\ninvalid lines by reason:")
        for reason, n in reasons.most_common():
            print(f"{n:>5}  {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
