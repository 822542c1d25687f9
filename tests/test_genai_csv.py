"""genai-perf / AIPerf CSV exports: metric names whose own text holds parentheses keep their last parenthesised part
as the unit, and a table of another kind (AIPerf's per-GPU telemetry) is skipped with a caveat, not misread. The
rows are built here (shaped like AIPerf 0.10's export), so the right values are known."""

from __future__ import annotations

from pathlib import Path

from perfsleuth.ingest.inference_bench import read_bench


def test_nested_parentheses_and_a_telemetry_table(tmp_path: Path) -> None:
    p = tmp_path / "profile_export_aiperf.csv"
    p.write_text(
        "Metric,avg,min,max,p50,std\r\n"
        "HTTP Waiting (TTFB) (ms),229.45,74.83,686.71,177.33,151.41\r\n"
        "Time to First Token (ms),230.14,75.04,693.93,177.79,152.24\r\n"
        "\r\n"
        "Metric,Value\r\n"
        "Request Count,96.00\r\n"
        "Request Throughput (requests/sec),2.16\r\n"
        "\r\n"
        "Endpoint,GPU_Index,Metric,avg\r\n"
        "http://localhost:9401/metrics,0,GPU Power Usage (W),350.00\r\n"
    )
    sd = read_bench(p)
    r = sd.tables["inference_records"].to_pylist()[0]
    assert (r["ttft_median_ms"], r["request_throughput_rps"], r["completed"]) == (177.79, 2.16, 96)
    assert dict(r["extra"])["http_waiting_ttfb"] == 229.45
    assert [c.code for c in sd.caveats if c.code == "table_not_read"] == ["table_not_read"]
