"""The shared atheris (coverage-guided, libFuzzer) runner behind every ``fuzz_<reader>.py`` harness.

A harness names one reader of ``tests/fuzz_support.py`` (the same readers, samples and property as the
hypothesis tests); the runner seeds the corpus with the reader's real sample(s), writes each input to a
file with the reader's file name, reads it, and turns a broken property (an exception that is not
perfsleuth's own error naming the file, a hang, a table off its schema) into a libFuzzer crash, whose
input is saved as ``crash-*`` in the working directory. perfsleuth's modules are instrumented for
coverage; the libraries under them (pyarrow, msgspec, sqlite3, duckdb) are not.

    .venv/bin/python fuzz/fuzz_kineto.py -max_total_time=60 -rss_limit_mb=4096 [corpus_dir]
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

with atheris.instrument_imports(include=["perfsleuth"]):
    import perfsleuth.engine  # noqa: F401
    import perfsleuth.ingest.adapters  # noqa: F401
    import perfsleuth.ingest.tables  # noqa: F401
    import perfsleuth.ingest.traces  # noqa: F401

import json  # noqa: E402

import fuzz_support as fs  # noqa: E402

Reader = tuple[str, list[bytes], Callable[[Path], Mapping[str, object]], object]


def _readers() -> dict[str, Reader]:
    """name -> (file name, seed inputs, read function, schemas the tables must match)."""
    schemas = fs.known_schemas()
    out: dict[str, Reader] = {
        "kineto": ("rank-0.json", [json.dumps(fs.kineto_sample()).encode()], lambda p: fs.trace_tables("kineto", p), schemas),
        "jax": ("vm.trace.json", [json.dumps(fs.jax_sample()).encode()], lambda p: fs.trace_tables("jax", p), schemas),
        "nsys": ("report.sqlite", [fs.nsys_sample()], lambda p: fs.trace_tables("nsys", p), schemas),
        "tables": ("samples.csv", [fs.csv_sample().encode()], fs.compare_input, None),
        "tables_parquet": ("samples.parquet", [fs.parquet_sample()], fs.compare_input, None),
        "localize": ("samples.csv", [fs.csv_sample().encode()], fs.localize_input, None),
        "localize_parquet": ("samples.parquet", [fs.parquet_sample()], fs.localize_input, None),
    }
    for name, (file_name, rels, _) in fs.ADAPTER_SAMPLES.items():
        out[name] = (file_name, [fs.text_sample(r, 120).encode() for r in rels], fs.adapter_tables(name), schemas)
    return out


def main(reader: str) -> None:
    file_name, seeds, read, schemas = _readers()[reader]
    work = Path(tempfile.mkdtemp(prefix=f"perfsleuth-fuzz-{reader}-"))
    corpus = work / "corpus"
    corpus.mkdir()
    for i, seed in enumerate(seeds):
        (corpus / f"seed-{i}").write_bytes(seed)
    path = work / "input" / file_name
    path.parent.mkdir()

    def one_input(data: bytes) -> None:
        path.write_bytes(data)
        fs.check_reader(read, path, schemas)

    args = [a for a in sys.argv if a]
    if not any(a.startswith("-artifact_prefix=") for a in args):
        args.insert(1, f"-artifact_prefix={work}/")  # crash-* inputs go beside the corpus, not into the checkout
    if not any(not a.startswith("-") for a in args[1:]):
        args.append(str(corpus))  # no corpus given: start from the real samples
    atheris.Setup(args, one_input)
    atheris.Fuzz()
