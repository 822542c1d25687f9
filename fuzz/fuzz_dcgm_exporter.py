"""atheris harness: the dcgm_exporter reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("dcgm_exporter")
