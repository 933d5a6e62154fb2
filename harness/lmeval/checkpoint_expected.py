"""The tiny configs of producer checkpoints, producer-<producer>-<scheme>.yaml:
rendered like tiny-<scheme>.yaml (harness/lmeval/expected.py: the same rules,
from the SPREAD of runs under several CPU kernel sets, never one run) plus
their `harness.checkpoint` section.

    python -m harness.lmeval.checkpoint_expected measure --producer P --scheme S --reports R
        (run once per kernel set: ATEN_CPU_CAPABILITY=default|avx2|avx512)
    python -m harness.lmeval.checkpoint_expected render --producer P --scheme S --from LABEL=R/<run>/lm_eval ...
    python -m harness.lmeval.checkpoint_expected bootstrap   (every missing config, values null;
        a tiny family model's row: its tiny family config plus the checkpoint section, always rewritten)
"""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.lmeval import expected
from harness.lmeval.configs import CONFIG_DIR, config_name, tiny_family_config_path
from harness.models import tiny_families
from harness.checkpoints import producers
from harness.util.report import ReportDir
from harness.lmeval.config import load
from harness.lmeval.evaluate import run_config
from harness.lmeval.report import write_lm_eval_report


def _checkpoint_lines(producer: str, scheme: str) -> list[str]:
    p = producers.get(producer)
    return ["  checkpoint:    # the experts come from this producer's checkpoint (harness/lmeval/checkpoint_config.py)",
            f"    format: {p.fmt}",
            f"    producer: {producer}",
            f"    producer_scheme: {scheme}"]


def render_family(producer: str, scheme: str) -> str:
    """A row whose float model is a tiny RANDOM family model: its config is the
    model's own tiny-<model_type>-<scheme>.yaml (KL and certified-oracle gates,
    no accuracy: random weights have none) with the checkpoint section. Its KL
    bound holds unchanged because the checkpoint's codes, scale bytes and
    biases are the ones the harness' own quantization gives (proved layer by
    layer in suites/checkpoints/test_family_checkpoints.py)."""
    p = producers.get(producer)
    hscheme = producers.harness_scheme(producer, scheme)
    model_type = tiny_families.TINY_FAMILIES[p.model].model_type
    src = tiny_family_config_path(model_type, hscheme)
    lines = src.read_text().split("\n")
    head = [f"# {p.model}, {producer} {scheme} checkpoint (made by `moe-harness checkpoint make --producer {producer} "
            f"--scheme {scheme}`), evaluated as {hscheme}:",
            "# the experts (and their biases) read from the checkpoint, everything else from the float model.",
            f"# Gates and values as {src.name} (rendered from it by python -m harness.lmeval.checkpoint_expected"
            " bootstrap):"]
    at = lines.index(f"  scheme: {hscheme}") + 1
    return "\n".join(head + lines[:at] + _checkpoint_lines(producer, scheme) + lines[at:])


def render(producer: str, scheme: str, th, desc: str) -> str:
    if producers.get(producer).model is not None:
        raise ValueError(f"{producer}: a tiny family model's checkpoint config is render_family's "
                         "(KL and oracle gates of its tiny family config)")
    hscheme = producers.harness_scheme(producer, scheme)
    lines = expected.render(hscheme, th, desc).split("\n")
    lines[0] = (f"# tiny-moe, {producer} {scheme} checkpoint (made by `moe-harness checkpoint make --producer {producer} "
                f"--scheme {scheme}`), evaluated as {hscheme}: gates against the bf16 baseline on the same items.")
    at = lines.index(f"  scheme: {hscheme}") + 1
    lines = lines[:at] + _checkpoint_lines(producer, scheme) + lines[at:]
    if th is None:
        # Not measured yet: no accuracy budget is invented from fewer runs than the kernel sets;
        # kl_oracle (0 by construction, independent of the kernels) is the gate until then.
        a, b = lines.index("    paired:"), lines.index("    kl:")
        lines[a:b] = ["    paired: false    # not measured under the CPU kernel sets yet: no allowance; values recorded only"]
    return "\n".join(lines)


def _measure(args) -> int:
    import os



    cfg = load(CONFIG_DIR / config_name(args.producer, args.scheme))
    rd = ReportDir.create(f"{args.producer}-{args.scheme}-{os.environ.get('ATEN_CPU_CAPABILITY', 'auto')}",
                          root=args.reports)
    r = run_config(cfg, limit=expected.LIMIT, progress=print)
    write_lm_eval_report(rd, [r], title=f"lm-eval {cfg.path}")
    print(f"{'PASSED' if r['passed'] else 'FAILED'} {r['message']} -> {rd.path}")
    return 0 if not r.get("skipped") else 3


def _render(args) -> int:
    hscheme = producers.harness_scheme(args.producer, args.scheme)
    runs, labels = [], []
    for item in args.src:
        label, _, folder = item.partition("=")
        labels.append(label)
        runs.append(expected.read_run(label, folder)[hscheme])
    th = expected.derive(hscheme, runs)
    problems = expected.check(hscheme, runs, th)
    if problems:
        for line in problems:
            print(f"refused: {line}")
        return 1
    desc = (f"`python -m harness.lmeval.checkpoint_expected measure` ({expected.LIMIT} items) under {len(labels)} "
            "kernel sets: " + ", ".join(labels))
    out = Path(args.out) / config_name(args.producer, args.scheme)
    out.write_text(render(args.producer, args.scheme, th, desc))
    print(f"wrote {out}")
    return 0


def _bootstrap(args) -> int:
    for name, p in producers.PRODUCERS.items():
        for s in p.schemes:
            out = Path(args.out) / config_name(name, s)
            if p.model is not None:  # follows its tiny family config, rewritten whenever that changes
                out.write_text(render_family(name, s))
            elif not out.exists():  # a rendered (measured) config is never overwritten by a blank one
                out.write_text(render(name, s, None, "no measured runs yet"))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.lmeval.checkpoint_expected")
    sub = ap.add_subparsers(dest="action", required=True)
    for name in ("measure", "render"):
        sp = sub.add_parser(name)
        sp.add_argument("--producer", required=True)
        sp.add_argument("--scheme", required=True)
        sp.add_argument("--reports", default="reports")
        sp.add_argument("--from", dest="src", action="append", default=[])
        sp.add_argument("--out", default=str(CONFIG_DIR))
    b = sub.add_parser("bootstrap")
    b.add_argument("--out", default=str(CONFIG_DIR))
    args = ap.parse_args(argv)
    return {"measure": _measure, "render": _render, "bootstrap": _bootstrap}[args.action](args)


if __name__ == "__main__":
    raise SystemExit(main())
