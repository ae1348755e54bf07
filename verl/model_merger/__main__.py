"""`python -m verl.model_merger {merge,test} --backend fsdp --local_dir ... (--target_dir ... | --test_hf_dir ...)`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from verl.model_merger.base_model_merger import build_parser, generate_config_from_args


def main(argv: Sequence[str] | None = None) -> str | None:
    args = build_parser().parse_args(argv)
    try:
        config = generate_config_from_args(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    from verl.checkpoint.manifest import CheckpointIntegrityError
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    merger = FSDPModelMerger(config)
    try:
        return merger.merge_and_save()
    except (CheckpointIntegrityError, FileNotFoundError, ValueError, AssertionError) as err:
        # the message names the file or key; a traceback would only bury it
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    finally:
        merger.cleanup()


if __name__ == "__main__":
    main()
