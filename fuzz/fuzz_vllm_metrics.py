"""atheris harness: the vllm_metrics reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("vllm_metrics")
