"""atheris harness: the dcgmi_dmon reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("dcgmi_dmon")
