"""The example notebook runs, start to end, on freshly generated data (nbclient, a real kernel), and
the report renders in it as HTML."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"


def test_the_example_notebook_executes(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # committed without outputs
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    report_cell = nb.cells[2].outputs
    html = next(o for o in report_cell if o.output_type == "execute_result")["data"]["text/html"]
    assert "perfsleuth · run job" in html
    faults = str(nb.cells[1].outputs[0]["data"]["text/plain"])
    found = str(nb.cells[3].outputs[0]["data"]["text/plain"])
    assert "straggler_rank" in faults and "straggler_rank" in found  # the injected straggler is found
