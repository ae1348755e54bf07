"""``ProfilerConfig``: which ranks a role would profile, at upstream's path ``verl.utils.profiler``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ProfilerConfig:
    """A role's profiler settings, as upstream's dataclass.

    Args:
        tool: the profiler (``nsys``, ``torch``, ...); None: none chosen.
        enable: profile this role.
        all_ranks: profile every rank (``ranks`` is then ignored).
        ranks: the ranks to profile when ``all_ranks`` is off.
        save_path: where the traces would go.
        discrete: one trace per task instead of one per step.
    """

    tool: str | None = None
    enable: bool = False
    all_ranks: bool = False
    ranks: list[int] = field(default_factory=list)
    save_path: str | None = None
    discrete: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.ranks, (list, tuple, set)):
            # AssertionError as upstream, so code written against it still catches it
            raise AssertionError(f"ProfilerConfig.ranks must be a list of ranks, got {type(self.ranks).__name__} "
                                 f"{self.ranks!r}")

    def union(self, other: ProfilerConfig) -> ProfilerConfig:
        """Profile what either config profiles."""
        return ProfilerConfig(tool=self.tool or other.tool, enable=self.enable or other.enable,
                              all_ranks=self.all_ranks or other.all_ranks,
                              ranks=sorted(set(self.ranks) | set(other.ranks)),
                              save_path=self.save_path or other.save_path, discrete=self.discrete or other.discrete)

    def intersect(self, other: ProfilerConfig) -> ProfilerConfig:
        """Profile only what both configs profile."""
        return ProfilerConfig(tool=self.tool if self.tool == other.tool else None,
                              enable=self.enable and other.enable, all_ranks=self.all_ranks and other.all_ranks,
                              ranks=sorted(set(self.ranks) & set(other.ranks)),
                              save_path=self.save_path if self.save_path == other.save_path else None,
                              discrete=self.discrete and other.discrete)
