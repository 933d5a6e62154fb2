"""Upload-time variable interpolation, as `buildkite-agent pipeline upload` does it.

Supported: `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
`${VAR:?message}`, `${VAR?message}`, and the escapes `$$` and `\\$` (a literal
`$` left for the shell at job time). Anything else (substrings, replacements)
is refused rather than guessed.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_TOKEN = re.compile(r"\$\$|\\\$|\$\{([^}]*)\}|\$(" + _NAME + r")")
_BRACED = re.compile(r"^(" + _NAME + r")(?:(:?)([-?])(.*))?$", re.S)


class InterpolationError(ValueError):
    pass


def interpolate_string(text: str, env: Mapping[str, str]) -> str:
    def sub(m: re.Match) -> str:
        whole = m.group(0)
        if whole in ("$$", "\\$"):
            return "$"
        if m.group(2):
            return env.get(m.group(2), "")
        inner = m.group(1)
        b = _BRACED.match(inner)
        if not b:
            raise InterpolationError(f"${{{inner}}}: this form of interpolation is not supported locally")
        name, colon, op, arg = b.groups()
        value = env.get(name)
        unset = value is None or (colon == ":" and value == "")
        if op is None:
            return value or ""
        if op == "-":
            return interpolate_string(arg, env) if unset else value
        if unset:  # op == "?"
            raise InterpolationError(f"${{{inner}}}: {name} is not set ({arg or 'required'})")
        return value

    return _TOKEN.sub(sub, text)


def interpolate(obj: Any, env: Mapping[str, str], where: str = "") -> Any:
    """Interpolate every string value (never keys) of a parsed pipeline."""
    if isinstance(obj, str):
        try:
            return interpolate_string(obj, env)
        except InterpolationError as exc:
            raise InterpolationError(f"{where}: {exc}") from None
    if isinstance(obj, list):
        return [interpolate(v, env, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        return {k: interpolate(v, env, f"{where}.{k}" if where else str(k)) for k, v in obj.items()}
    return obj


def interpolate_pipeline(doc: dict, upload_env: Mapping[str, str]) -> dict:
    """The pipeline's own top-level env is interpolated first and is visible to the rest."""
    env = dict(upload_env)
    top = doc.get("env")
    if isinstance(top, dict):
        top = interpolate(top, env, "env")
        env.update({k: "" if v is None else str(v) for k, v in top.items()})
    out = interpolate({k: v for k, v in doc.items() if k != "env"}, env)
    if isinstance(top, dict):
        out["env"] = top
    return out
