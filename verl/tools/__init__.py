"""Tools a model calls during multi-turn rollout (upstream's verl.tools API): BaseTool, built-in tools, the registry."""
