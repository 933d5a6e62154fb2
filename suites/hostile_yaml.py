"""YAML that attacks a loader, shared by the config and pipeline input suites."""


def alias_bomb(levels: int = 9) -> str:
    """Anchors a0..a<levels>, each a list of ten aliases of the previous one:
    10**(levels + 1) scalars once expanded, a few hundred bytes as text."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"
