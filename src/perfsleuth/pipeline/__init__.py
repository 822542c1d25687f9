"""The one per-file trace pipeline, and ``analyze``: where adapters are driven and analyses run.

Every trace reader and every per-rank analysis meet here, in one shape: the job's trace files are
handed to a worker pool (``ingest.kineto.map_rank_files``, bounded by memory), each worker decodes one
file into its ranks (``ingest.traces.read_trace_file``) and applies a per-rank step to each rank where
it was decoded, so only that step's small result and the file's facts cross back; the job is then
put together from those. ``analyze`` plugs in the per-rank trace analysis (``trace.rank_analysis``),
``diff_traces`` the diff's per-rank rows (``trace.diff.measure_rank``), ``read_trace_job`` nothing (it
keeps every event). The analyses below never read a file; the adapters never analyse.

``verify`` runs the same pipeline on a fix's two sides and checks the saving its finding predicted.
``perfsleuth.api`` is the public face of these functions; the commands call them from here.
"""

from perfsleuth.pipeline.job import (
    JobReport,
    analyze,
    analyze_streaming,
    analyze_traces,
    diff_side,
    diff_traces,
    load_trace_job,
    map_ranks,
    read_trace_job,
)

__all__ = [
    "JobReport",
    "analyze",
    "analyze_streaming",
    "analyze_traces",
    "diff_side",
    "diff_traces",
    "load_trace_job",
    "map_ranks",
    "read_trace_job",
]
