"""A small evaluator for Buildkite step `if` conditions.

Understood: the variables in VARIABLES, `build.env("NAME")`, string / integer /
null / true / false literals, `==`, `!=`, `=~` and `!~` against a /regex/,
`!`, `&&`, `||` and parentheses. Anything else raises UnsupportedCondition, so
the local runner refuses a step it cannot decide instead of guessing.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

VARIABLES = (
    "build.branch", "build.tag", "build.message", "build.source", "build.commit", "build.number",
    "build.id", "build.creator.email", "build.pull_request.id", "build.pull_request.base_branch",
    "build.pull_request.draft", "pipeline.slug", "pipeline.default_branch",
)


class UnsupportedCondition(ValueError):
    pass


_TOKENS = re.compile(
    r"""\s*(?:
      (?P<op>&&|\|\||==|!=|=~|!~|!|\(|\))
    | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<regex>/(?:[^/\\]|\\.)*/[a-z]*)
    | (?P<env>build\.env\(\s*(?:"[^"]*"|'[^']*')\s*\))
    | (?P<num>\d+)
    | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
    )""",
    re.X,
)


def _tokenize(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKENS.match(text, pos)
        if not m or m.end() == pos:
            raise UnsupportedCondition(f"cannot read {text[pos:].strip()!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens, values):
        self.t, self.i, self.values = tokens, 0, values

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else (None, None)

    def take(self, value=None):
        tok = self.peek()
        if tok[0] is None or (value is not None and tok[1] != value):
            raise UnsupportedCondition(f"expected {value or 'more'} at {' '.join(v for _, v in self.t[self.i:]) or 'end'}")
        self.i += 1
        return tok

    def expr(self):
        left = self.conj()
        while self.peek()[1] == "||":
            self.take()
            right = self.conj()
            left = bool(left) or bool(right)
        return left

    def conj(self):
        left = self.unary()
        while self.peek()[1] == "&&":
            self.take()
            right = self.unary()
            left = bool(left) and bool(right)
        return left

    def unary(self):
        if self.peek()[1] == "!":
            self.take()
            return not self.unary()
        return self.compare()

    def compare(self):
        left = self.atom()
        op = self.peek()[1]
        if op in ("==", "!="):
            self.take()
            right = self.atom()
            return (left == right) == (op == "==")
        if op in ("=~", "!~"):
            self.take()
            kind, raw = self.take()
            if kind != "regex":
                raise UnsupportedCondition(f"{op} needs a /regex/, got {raw!r}")
            body, flags = raw[1:].rsplit("/", 1)
            if set(flags) - {"i"}:
                raise UnsupportedCondition(f"regex flags {flags!r} are not supported")
            found = re.search(body, "" if left is None else str(left), re.I if "i" in flags else 0)
            return (found is not None) == (op == "=~")
        return left

    def atom(self) -> Any:
        kind, raw = self.take()
        if raw == "(":
            value = self.expr()
            self.take(")")
            return value
        if kind == "str":
            return bytes(raw[1:-1], "utf-8").decode("unicode_escape")
        if kind == "num":
            return int(raw)
        if kind == "env":
            name = re.search(r"[\"'](.*)[\"']", raw).group(1)
            return self.values.get("env", {}).get(name)
        if kind == "name":
            if raw == "null":
                return None
            if raw in ("true", "false"):
                return raw == "true"
            if raw in VARIABLES:
                return self.values.get(raw)
            raise UnsupportedCondition(f"variable {raw!r} is not one the local runner knows ({', '.join(VARIABLES)})")
        raise UnsupportedCondition(f"unexpected {raw!r}")


def evaluate(condition: str, values: Mapping[str, Any]) -> bool:
    """values: the VARIABLES by name, plus "env": a mapping for build.env()."""
    parser = _Parser(_tokenize(condition), values)
    result = parser.expr()
    if parser.i != len(parser.t):
        rest = " ".join(v for _, v in parser.t[parser.i:])
        raise UnsupportedCondition(f"cannot read {rest!r}")
    return bool(result)
