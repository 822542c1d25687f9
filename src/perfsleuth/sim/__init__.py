"""Simulators: synthetic jobs, fleets and signals with faults of known size, written in the formats real tools write.

They are for coverage and for faults no public trace shows; nothing in the runtime (analyze, ingest, localize,
the reports) imports them. The demo and ``perfsleuth cases make`` do, explicitly.
"""
