"""Statistics that a performance engineer can trust (intervals, not bare means).

The toolbox every layer above uses: ``resample`` (the one bootstrap: iid, moving-block and per-arm
resamples, percentile bounds), ``summary`` (the one median interval), ``confidence`` (the one policy
turning a measure's margin over its bar into a finding's confidence); the interval type itself is
``perfsleuth.model.Interval``, so findings carry it without importing statistics.
"""
