"""Compare upstream's flat `_generated_ppo_trainer.yaml` with ours: which of upstream's leaf keys are missing here,
which leaves only we have, and which shared leaves have another default.

    python scripts/compare_upstream_keys.py UPSTREAM_GENERATED.yaml [--show missing|ours|defaults]

Fetch upstream's file by hand (it is not shipped): for example with the search tools' read_file on repository
volcengine/verl (or a copy of upstream of the version you want), path verl/trainer/config/_generated_ppo_trainer.yaml.
A leaf is a value that is not a mapping, or an empty mapping; a list counts as one leaf. An upstream leaf that
is a section here (`engine_kwargs: null` there, `engine_kwargs: {vllm: {}}` here) counts as present. Defaults are compared as
written, so an interpolation (`${oc.select:...}`) differs from the value it resolves to.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verl.trainer.config.yaml_files import GENERATED, walk_keys  # noqa: E402


def keys(path: Path) -> dict[str, object]:
    """Every key (sections too) -> its value as written."""
    return dict(walk_keys(OmegaConf.to_container(OmegaConf.load(path), resolve=False)))


def leaves(every: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in every.items() if not isinstance(v, dict) or not v}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", type=Path)
    parser.add_argument("--show", choices=("missing", "ours", "defaults"), action="append", default=[])
    args = parser.parse_args()
    theirs, every_ours = leaves(keys(args.upstream)), keys(GENERATED)
    ours = leaves(every_ours)
    missing = sorted(set(theirs) - set(every_ours))  # a leaf of theirs that is a section here is present
    only_ours = sorted(set(ours) - set(theirs))
    differ = sorted(k for k in set(theirs) & set(ours) if theirs[k] != ours[k])
    print(f"upstream leaves: {len(theirs)}; ours: {len(ours)}")
    print(f"upstream's leaves present here: {len(theirs) - len(missing)} of {len(theirs)} (missing {len(missing)})")
    print(f"leaves only here: {len(only_ours)}; shared leaves with another default: {len(differ)}")
    for key in missing if "missing" in args.show else ():
        print(f"missing\t{key}\t{theirs[key]!r}")
    for key in only_ours if "ours" in args.show else ():
        print(f"ours\t{key}\t{ours[key]!r}")
    for key in differ if "defaults" in args.show else ():
        print(f"default\t{key}\tupstream {theirs[key]!r}\there {ours[key]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
