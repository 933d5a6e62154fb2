"""docs/fault-injection.md holds the fault table rendered from the fault list
of suites/fault_injection.py, not a copy kept by hand: the block between its
markers must equal render_table(). After changing the list, run
`python -m suites.fault_injection --render-docs`."""
import pytest

from suites import fault_injection as fi


def test_doc_holds_the_rendered_fault_table():
    block = fi.doc_block(fi.DOC.read_text())
    assert block is not None, f"{fi.DOC}: markers {fi.DOC_BEGIN!r} ... {fi.DOC_END!r} not found"
    assert block == fi.render_table(), (
        f"{fi.DOC} differs from the fault list; run: python -m suites.fault_injection --render-docs")


def test_every_fault_has_one_row():
    rows = fi.render_table().splitlines()[2:]
    assert len(rows) == len(fi.FAULTS)
    assert all(row.startswith(f"| {name} | `{path}` |") for row, (name, path, *_rest) in zip(rows, fi.FAULTS))


def test_render_docs_rewrites_only_the_block(tmp_path):
    doc = tmp_path / "doc.md"
    before, after = "# Title\n\nprose before\n\n", "\n\nprose after\n"
    doc.write_text(before + fi.DOC_BEGIN + "\n| stale | table |\n" + fi.DOC_END + after)
    assert fi.render_docs(doc) is True
    assert doc.read_text() == before + fi.DOC_BEGIN + "\n" + fi.render_table() + fi.DOC_END + after
    assert fi.render_docs(doc) is False  # already current: nothing written


def test_render_docs_refuses_a_doc_without_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("no markers here\n")
    with pytest.raises(SystemExit, match="markers"):
        fi.render_docs(doc)
