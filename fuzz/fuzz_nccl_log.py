"""atheris harness: the nccl_log reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("nccl_log")
