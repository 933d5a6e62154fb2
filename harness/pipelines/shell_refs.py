"""Which checkout files a step's shell commands name, read with a shell lexer.

Only words in path position count: the command itself when written as a
path, an interpreter's script (`bash scripts/x.sh`, `python tools/y.py`; the
script's own arguments are its business), input redirections, and arguments
of path-taking commands (pytest, cd, ls, cat, ...) or words that end in a file
extension. What the step creates (`mkdir`, `touch`, `tee`, the target of
`cp`/`mv`/`ln`, `>` redirections, `-o`/`--output`/`--junitxml` values) is
not looked for. Absolute paths, `~`, `..` out of the checkout, variables and
URLs are never checked: they are not files of the checkout.
"""

from __future__ import annotations

import re
import shlex

# Folders that commands create (virtualenv, outputs): names under them are not checked.
OUTPUT_DIRS = {".venv", "reports", ".hypothesis", ".pytest_cache"}
FILE_EXTS = (".py", ".sh", ".yaml", ".yml", ".json", ".jsonl", ".toml", ".cfg", ".txt")

INTERPRETERS = {"bash", "sh", "zsh", "dash", "source", "."}
PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
# Commands whose positional arguments are paths of the checkout.
PATH_COMMANDS = {"pytest", "cd", "ls", "cat", "head", "tail", "wc", "ruff", "mypy", "pylint", "flake8", "black",
                 "chmod", "diff", "cmp", "grep"}
# Commands that create the paths they are given.
CREATES_ALL = {"mkdir", "touch", "tee"}
CREATES_LAST = {"cp", "mv", "ln", "install", "rsync"}
# Prefix commands: the real command follows (after their own options).
WRAPPERS = {"timeout", "env", "nice", "nohup", "time", "exec", "sudo", "command", "stdbuf", "xargs"}
OUTPUT_OPTIONS = {"-o", "--output", "--out", "--junitxml", "--junit-xml", "--report-root", "--reports", "--outdir",
                  "--output-dir"}
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATORS = set("();<>|&")


def _tokens(command: str) -> list[str]:
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    out = []
    for tok in lex:  # ValueError on unbalanced quotes: the caller reports bad shell
        # backquoted command substitution: the backquote ends one command, starts another
        if tok.startswith("`") and len(tok) > 1:
            out += [";", tok[1:]]
        elif tok.endswith("`") and len(tok) > 1:
            out += [tok[:-1], ";"]
        elif tok == "`":
            out.append(";")
        else:
            out.append(tok)
    return out


def _is_operator(tok: str) -> bool:
    return bool(tok) and all(c in _OPERATORS for c in tok)


def _segments(tokens: list[str]):
    """Simple commands as (words, redirections [(operator, target)])."""
    words, redirs = [], []
    it = iter(range(len(tokens)))
    for i in it:
        tok = tokens[i]
        if tok == "$":  # `$(`: command substitution starts
            continue
        if _is_operator(tok) and ("<" in tok or ">" in tok):
            if i + 1 < len(tokens) and not _is_operator(tokens[i + 1]):
                redirs.append((tok, tokens[i + 1]))
                next(it, None)
            continue
        if _is_operator(tok):
            if words or redirs:
                yield words, redirs
            words, redirs = [], []
            continue
        words.append(tok)
    if words or redirs:
        yield words, redirs


def _strip_prefix(words: list[str]) -> list[str]:
    """Drop leading VAR=value assignments and wrapper commands (timeout 5m, env X=1, ...)."""
    i = 0
    while i < len(words):
        w = words[i]
        if _ASSIGN.match(w):
            i += 1
            continue
        name = w.rsplit("/", 1)[-1]
        if name in WRAPPERS:
            i += 1
            while i < len(words) and (words[i].startswith("-") or _ASSIGN.match(words[i])):
                i += 1
            if name == "timeout" and i < len(words):
                i += 1  # the duration
            continue
        break
    return words[i:]


def _option_value(w: str) -> str:
    return w.split("=", 1)[1] if w.startswith("--") and "=" in w else w


class Refs:
    def __init__(self):
        self.checked: list[str] = []   # in path position, to look for in the checkout
        self.created: list[str] = []   # made by the commands themselves

    def add_command(self, command: str) -> None:
        for words, redirs in _segments(_tokens(command)):
            for op, target in redirs:
                if target.isdigit() or target == "-":
                    continue  # 2>&1, >&-
                (self.created if ">" in op else self.checked).append(target)
            self._simple(words)

    def _simple(self, words: list[str]) -> None:
        # make test PYTEST_ARGS="--ignore=suites/x": assignments given as arguments carry words too
        words = _strip_prefix(words)
        if not words:
            return
        cmd, args = words[0], words[1:]
        name = cmd.rsplit("/", 1)[-1]
        if "/" in cmd:
            self.checked.append(cmd)
        outputs = [i + 1 for i, a in enumerate(args[:-1]) if a in OUTPUT_OPTIONS]
        for i, a in enumerate(args):
            if a.startswith("--") and "=" in a and a.split("=", 1)[0] in OUTPUT_OPTIONS:
                self.created.append(a.split("=", 1)[1])
            elif i in outputs:
                self.created.append(a)
        args = [a for i, a in enumerate(args) if i not in outputs]
        if name in CREATES_ALL:
            self.created += [a for a in args if not a.startswith("-")]
            return
        if name in CREATES_LAST:
            positional = [a for a in args if not a.startswith("-")]
            if positional:
                self.created.append(positional[-1])
                self.checked += positional[:-1]
            return
        if name in INTERPRETERS:
            script = next((a for a in args if not a.startswith("-")), None)
            if script is not None and "-c" not in args[:args.index(script)]:
                self.checked.append(script)
            return
        if PYTHON.match(name):
            self._python(args)
            return
        self._generic(name, args)

    def _python(self, args: list[str]) -> None:
        i = 0
        while i < len(args):
            a = args[i]
            if a == "-c":
                return
            if a == "-m" and i + 1 < len(args):
                self._generic(args[i + 1], args[i + 2:])
                return
            if not a.startswith("-"):
                self.checked.append(a)  # the script; what follows is its own arguments
                return
            i += 1

    def _generic(self, name: str, args: list[str]) -> None:
        for a in args:
            if _ASSIGN.match(a):
                try:
                    inner = shlex.split(a.split("=", 1)[1])
                except ValueError:
                    continue
                for w in inner:
                    w = _option_value(w)
                    if not w.startswith("-") and w.endswith(FILE_EXTS):
                        self.checked.append(w)
                continue
            if a.startswith("-") and not (a.startswith("--") and "=" in a):
                continue
            w = _option_value(a)
            if w.split("::", 1)[0].endswith(FILE_EXTS) or (name in PATH_COMMANDS and "/" in w):
                self.checked.append(w)


def _outside(ref: str) -> bool:
    if ref.startswith(("/", "~")):
        return True
    depth = 0
    for part in ref.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _under(ref: str, created: list[str]) -> bool:
    ref = ref.rstrip("/").removeprefix("./")
    for c in created:
        c = c.rstrip("/").removeprefix("./")
        if c and (ref == c or ref.startswith(c + "/")):
            return True
    return False


def path_refs(commands: list[str]) -> list[str]:
    """The checkout paths the commands need to exist, in order, without repeats; ValueError on bad shell."""
    refs = Refs()
    for c in commands:
        refs.add_command(c)
    out = []
    for ref in refs.checked:
        ref = ref.split("::", 1)[0]  # pytest node id
        if (not ref or "$" in ref or "://" in ref or any(ch.isspace() for ch in ref) or _outside(ref)
                or ref.removeprefix("./").split("/", 1)[0] in OUTPUT_DIRS or _under(ref, refs.created)):
            continue
        if ref not in out:
            out.append(ref)
    return out
