"""Diagnoses: detectors per fault class and the engine that runs them (see registry.py)."""

from perfsleuth.diagnose.registry import DETECTORS, Diagnosis, NotAssessed, diagnose, load_detectors

__all__ = ["DETECTORS", "Diagnosis", "NotAssessed", "diagnose", "load_detectors"]
