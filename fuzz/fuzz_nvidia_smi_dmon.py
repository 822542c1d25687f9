"""atheris harness: the nvidia_smi_dmon reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("nvidia_smi_dmon")
