"""`moe-harness` command line: parses and dispatches; each command lives in
its own package (docs/internal-api.md). Command modules are imported lazily so
one package's heavy imports (lm-eval, matplotlib) never slow another command."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from harness import __version__
from harness.commands import convention

# libgomp (torch's CPU thread pool) spins ~300k iterations before a waiting
# thread sleeps. With the cores busy elsewhere, `moe-harness eval` of one
# producer config at 2 threads took 140 s instead of 10 s; spinning 10k
# iterations took 26 s there and 10 s idle (a 2-core x86_64 machine). Set
# before torch is imported; a value in the environment wins.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

# command -> module with add_arguments(parser) and main(args) -> int
COMMANDS = {
    "run": ("harness.commands.run", "run every check on the default device and write a report"),
    "eval": ("harness.commands.eval", "lm-eval accuracy run with statistical gates"),
    "train-tiny": ("harness.commands.train_tiny", "train the bundled tiny MoE model (CPU, deterministic)"),
    "pipeline": ("harness.commands.pipeline", "validate or run Buildkite pipelines locally"),
    "conform": ("harness.commands.conform", "hold implementations of NVFP4 / OCP MX to the spec"),
    "checkpoint": ("harness.commands.checkpoint", "producer checkpoints of the tiny MoE (make, check, list) and synthetic real-size ones (synth)"),
    "targets": ("harness.commands.targets", "compile every Triton kernel ahead of time for gfx942, gfx950, sm_90, sm_100"),
}
BENCHES = {
    "kernels": ("harness.commands.bench.kernels", "Triton kernel bandwidth vs copy and torch.compile"),
    "moe": ("harness.commands.bench.moe", "emulated MoE forward vs bf16"),
    "eval": ("harness.commands.bench.eval", "tiny-model eval wall time"),
    "config-validate": ("harness.commands.bench.config_validate", "wall time of eval --dry-run on one config (fresh interpreters)"),
    "conform": ("harness.commands.bench.conform", "wall time of moe-harness conform over every installed adapter"),
    "multigpu": ("harness.commands.bench.multigpu", "load time, peak memory per GPU, tokens/s: 1 GPU vs 2 GPUs (both modes)"),
}


def _load(module: str):
    return importlib.import_module(module)


def _wire(p: argparse.ArgumentParser, module: str) -> None:
    """The command's own arguments, then the convention on every leaf parser."""
    mod = _load(module)
    mod.add_arguments(p)
    leaves = [leaf for _, leaf in convention.leaf_parsers(p)]
    for leaf in leaves:
        convention.add_common(leaf)
    if leaves != [p]:  # a command of subcommands: its own --help lists the codes too
        p.formatter_class = argparse.RawDescriptionHelpFormatter
        p.epilog = convention.exit_codes_text()
    p.set_defaults(_module=mod)


def build_parser(argv, load_all: bool = False) -> argparse.ArgumentParser:
    """The parser; only the chosen command's module is imported (its parser
    needs it), every module with `load_all` (suites/test_cli_convention.py)."""
    parser = argparse.ArgumentParser(prog="moe-harness", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=convention.exit_codes_text() + "\n\nmoe-harness COMMAND --help: "
                                     "each command's options (every one takes --reports DIR, -q, -v)")
    parser.add_argument("--version", action="version", version=f"moe-harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == chosen or load_all:
            _wire(p, module)
    bench = sub.add_parser("bench", help="benchmarks (JSON to stdout and reports/)")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    bench_chosen = argv[argv.index("bench") + 1] if chosen == "bench" and len(argv) > argv.index("bench") + 1 else None
    for name, (module, help_) in BENCHES.items():
        p = bench_sub.add_parser(name, help=help_, description=help_)
        if name == bench_chosen or load_all:
            _wire(p, module)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    words = [args.command] + [getattr(args, k) for k in ("bench", "action", "pipeline_command") if getattr(args, k, None)]
    return convention.run_with_report(args._module, args, words)


if __name__ == "__main__":
    sys.exit(main())
