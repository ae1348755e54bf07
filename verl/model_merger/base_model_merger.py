"""The merger's command line and the interface every backend implements.

    python -m verl.model_merger merge --backend fsdp --local_dir <ckpt>/global_step_N/actor --target_dir <hf_dir>
    python -m verl.model_merger test  --backend fsdp --local_dir <ckpt>/global_step_N/actor --test_hf_dir <hf_dir>
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from dataclasses import dataclass

BACKENDS = ("fsdp",)


@dataclass
class ModelMergerConfig:
    operation: str  # "merge" | "test"
    backend: str
    local_dir: str
    target_dir: str | None = "tmp"
    hf_model_config_path: str | None = None  # where config/tokenizer come from; default <local_dir>/huggingface
    test_hf_dir: str | None = None
    trust_remote_code: bool = False
    tie_word_embedding: bool = False
    hf_upload_path: str | None = None
    private: bool = False
    use_cpu_initialization: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"--backend {self.backend!r} is not supported here; use one of {list(BACKENDS)}")
        if self.operation == "test" and not self.test_hf_dir:
            raise ValueError("`test` needs --test_hf_dir: the HF folder to compare the merged weights against")
        if self.hf_upload_path:
            raise ValueError("--hf_upload_path: uploading to the Hugging Face hub is not supported (no network); "
                             "merge to --target_dir and upload that folder yourself")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m verl.model_merger",
                                     description="Merge a sharded verl checkpoint into a Hugging Face model folder.")
    sub = parser.add_subparsers(dest="operation", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", required=True, choices=BACKENDS, help="the training backend that saved it")
    common.add_argument("--local_dir", required=True, help="a role folder: <ckpt>/global_step_N/actor (or critic)")
    common.add_argument("--hf_model_path", default=None,
                        help="take config and tokenizer from this HF folder instead of <local_dir>/huggingface")
    common.add_argument("--tie-word-embedding", action="store_true", help="accepted for upstream compatibility; "
                        "tying follows the saved config")
    common.add_argument("--trust-remote-code", action="store_true", help="allow custom model code from the config")
    common.add_argument("--use_cpu_initialization", action="store_true", help="accepted; merging always runs on CPU")
    merge = sub.add_parser("merge", parents=[common], help="write the merged HF folder")
    merge.add_argument("--target_dir", default="tmp", help="output folder (safetensors + config + tokenizer)")
    merge.add_argument("--hf_upload_path", default=None, help="not supported (no network)")
    merge.add_argument("--private", action="store_true", help="accepted for upstream compatibility")
    test = sub.add_parser("test", parents=[common], help="check the checkpoint against an existing HF folder")
    test.add_argument("--test_hf_dir", required=True, help="the HF folder whose weights the checkpoint should equal")
    return parser


def generate_config_from_args(args: argparse.Namespace) -> ModelMergerConfig:
    return ModelMergerConfig(
        operation=args.operation, backend=args.backend, local_dir=args.local_dir,
        target_dir=getattr(args, "target_dir", None), hf_model_config_path=args.hf_model_path,
        test_hf_dir=getattr(args, "test_hf_dir", None), trust_remote_code=args.trust_remote_code,
        tie_word_embedding=args.tie_word_embedding, hf_upload_path=getattr(args, "hf_upload_path", None),
        private=getattr(args, "private", False), use_cpu_initialization=args.use_cpu_initialization)


class BaseModelMerger(ABC):
    def __init__(self, config: ModelMergerConfig) -> None:
        self.config = config

    @abstractmethod
    def merge_and_save(self) -> str | None:
        """`merge`: write config.target_dir and return it; `test`: compare with config.test_hf_dir (raise on a mismatch)."""

    def cleanup(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release anything the backend holds (nothing for the FSDP backend)."""
