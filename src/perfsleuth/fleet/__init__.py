"""The fleet page: from a records table to what a director, and then an engineer, needs to read.

``report.build_fleet_page`` reduces the records on the engine (daily trend, window totals, culprit
localization) and returns a typed ``FleetPage``; ``perfsleuth.report.fleet_html`` renders it.
"""
