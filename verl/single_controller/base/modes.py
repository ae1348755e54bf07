"""The dispatch and execute modes a `@register`-ed method names, and adding modes at run time.

`Dispatch` is a standard Enum; `add_dispatch_member` adds a member to it (what upstream verl's
`register_dispatch_mode` does to its dynamic enum), so `Dispatch.MY_MODE` works after registration.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["RANK_ZERO_COMPATIBLE", "Dispatch", "Execute", "add_dispatch_member"]


class Dispatch(Enum):
    """How the driver's arguments reach the ranks and how their results come back.

    RANK_ZERO: same args to every rank (so collectives inside the method still line up); rank 0's result returned.
    ONE_TO_ALL: same args to every rank; the list of per-rank results returned.
    ALL_TO_ALL: arguments that are lists of length world_size are split one element per rank, anything else is
        sent to every rank as is; the list of per-rank results returned.
    DP_COMPUTE: every argument is already a list of length world_size (element i goes to rank i); list returned.
    DP_COMPUTE_PROTO: every argument is a DataProto / DataProtoFuture, padded to a multiple of world_size and
        chunked; the per-rank DataProtos are concatenated and the padding removed.
    DP_COMPUTE_PROTO_WITH_FUNC: the first argument is a function sent to every rank; the rest as DP_COMPUTE_PROTO.
    DP_COMPUTE_METRIC: split as DP_COMPUTE_PROTO; the list of per-rank results (e.g. metric dicts) returned.
    """

    RANK_ZERO = "rank_zero"
    ONE_TO_ALL = "one_to_all"
    ALL_TO_ALL = "all_to_all"
    DP_COMPUTE = "dp_compute"
    DP_COMPUTE_PROTO = "dp_compute_proto"
    DP_COMPUTE_PROTO_WITH_FUNC = "dp_compute_proto_with_func"
    DP_COMPUTE_METRIC = "dp_compute_metric"


class Execute(Enum):
    """Which ranks run the method: every rank, or rank 0 alone (with the driver's arguments unchanged)."""

    ALL = "all"
    RANK_ZERO = "rank_zero"


# Execute.RANK_ZERO hands rank 0 the driver's raw arguments, which is only meaningful when nothing is split.
RANK_ZERO_COMPATIBLE = {Dispatch.RANK_ZERO, Dispatch.ONE_TO_ALL, Dispatch.ALL_TO_ALL}


def add_dispatch_member(name: str) -> Dispatch:
    """Add ``Dispatch.<name>`` (value: the name in lower case) and return it; the name must be new."""
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"a dispatch mode name must be a public identifier, got {name!r}")
    if name in Dispatch.__members__ or name.lower() in Dispatch._value2member_map_:
        raise ValueError(f"dispatch mode {name!r} already exists")
    member = object.__new__(Dispatch)
    member._name_, member._value_ = name, name.lower()
    member.__objclass__ = Dispatch
    member._sort_order_ = len(Dispatch._member_names_)
    Dispatch._member_names_.append(name)
    Dispatch._member_map_[name] = member
    Dispatch._value2member_map_[member._value_] = member
    type.__setattr__(Dispatch, name, member)  # EnumType.__setattr__ refuses new members; this is the class dict
    return member
