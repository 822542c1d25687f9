"""Capture a real JAX profile (``*.xplane.pb`` and the Perfetto/Chrome ``*.trace.json.gz``) of a jitted
training loop with step annotations, for the JAX reader's fixtures.

Usage: python3 scripts/capture_jax.py OUTDIR
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp


def init(key, d: int = 2048, h: int = 8192, layers: int = 4):
    keys = jax.random.split(key, 2 * layers)
    return [
        (jax.random.normal(keys[2 * i], (d, h), jnp.bfloat16) * 0.02, jax.random.normal(keys[2 * i + 1], (h, d), jnp.bfloat16) * 0.02)
        for i in range(layers)
    ]


def loss_fn(params, x):
    for w1, w2 in params:
        x = jax.nn.gelu(x @ w1) @ w2
    return jnp.mean(x.astype(jnp.float32) ** 2)


@jax.jit
def train_step(params, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return [(w1 - 1e-4 * g1, w2 - 1e-4 * g2) for (w1, w2), (g1, g2) in zip(params, grads, strict=True)], loss


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    params = init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (8192, 2048), jnp.bfloat16)
    params, loss = train_step(params, x)
    loss.block_until_ready()
    logdir = Path(tempfile.mkdtemp())
    with jax.profiler.trace(str(logdir), create_perfetto_trace=True):
        for step in range(5):
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                params, loss = train_step(params, x)
                loss.block_until_ready()
    for f in logdir.rglob("*"):
        if f.is_file():
            print("jax wrote", f.relative_to(logdir), f.stat().st_size)
            if f.name.endswith((".xplane.pb", ".trace.json.gz", ".json.gz")):
                shutil.copy(f, out / f.name)
    (out / "versions.txt").write_text(f"jax {jax.__version__}\ndevices {jax.devices()}\n")


if __name__ == "__main__":
    main()
