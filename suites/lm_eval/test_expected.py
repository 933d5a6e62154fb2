"""The config renderer derives thresholds from a spread of runs and refuses
ones a measured run would fail (harness/lmeval/expected.py)."""

import yaml

from harness.lmeval import expected as X

MC, GEN, BPB = "tiny_add_mc:acc,none", "tiny_add_gen:exact_match,none", "tiny_add_rolling:bits_per_byte,none"


def _run(label, mc, gen, bpb, drop_items=0, kl=0.05, oracle=0.0):
    m = X.Measured(label, "nvfp4", kl=kl, oracle_kl=oracle, oracle_max_ratio=0.25)
    for n in (X.LIMIT, X.RUN_LIMIT):
        m.values[(MC, n)], m.values[(GEN, n)], m.values[(BPB, n)] = mc[n], gen[n], bpb[n]
        for key in (MC, GEN):
            base = [1.0] * n
            m.items[(key, n)] = (base, [0.0] * drop_items + [1.0] * (n - drop_items))
    return m


def test_worst_value_over_runs_and_item_sets():
    a = _run("a", {600: 0.9, 200: 0.95}, {600: 0.8, 200: 0.75}, {600: 2.5, 200: 2.6}, drop_items=6, kl=0.05)
    b = _run("b", {600: 0.85, 200: 0.95}, {600: 0.8, 200: 0.8}, {600: 2.55, 200: 2.5}, drop_items=12, kl=0.06)
    th = X.derive("nvfp4", [a, b])
    assert th["values"] == {MC: 0.85, GEN: 0.75, BPB: 2.6}      # min for accuracy, max for bits/byte
    # largest drop: 12 of 200 items = 0.06 -> + 0.02 = 0.08
    assert th["allowances"][MC][0] == 0.08 and th["allowances"][GEN][0] == 0.08
    assert th["kl_max"] == 0.066                                 # 1.1 x the largest KL
    assert X.check("nvfp4", [a, b], th) == []


def test_refuses_a_threshold_a_run_would_fail():
    a = _run("a", {600: 0.9, 200: 0.9}, {600: 0.9, 200: 0.9}, {600: 2.5, 200: 2.5}, oracle=1e-9)
    th = X.derive("nvfp4", [a])
    problems = X.check("nvfp4", [a], th)
    assert len(problems) == 1 and "kl_oracle" in problems[0]     # oracle must be exactly 0
    th["values"][MC] = 0.99                                      # a hand-edited, too tight value
    assert any(MC in p for p in X.check("nvfp4", [a], th))


def test_rendered_yaml_reads_back():
    a = _run("a", {600: 0.9, 200: 0.9}, {600: 0.9, 200: 0.9}, {600: 2.5, 200: 2.5})
    doc = yaml.safe_load(X.render("nvfp4", X.derive("nvfp4", [a]), "one test run"))
    gates = doc["harness"]["gates"]
    assert doc["tasks"][0]["metrics"][0]["value"] == 0.9
    assert gates["kl"]["oracle_max"] == 0.0 and gates["kl"]["max"] == 0.055
    assert gates["paired"]["allowances"][MC] == 0.02
