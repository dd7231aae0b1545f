import numpy as np
import pytest


def pytest_configure(config):
    import jax

    # The tests compare against exact references: float32 matmuls in full precision on
    # every device (XLA:GPU's default is TF32, ~1e-3 relative).
    jax.config.update("jax_default_matmul_precision", "highest")


def has_gpu() -> bool:
    import jax

    return any(d.platform == "gpu" for d in jax.devices())


def pytest_collection_modifyitems(config, items):
    gpu = has_gpu()
    # Triton 3.6's interpreter breaks on numpy >= 2.4 once a loop bound is a loaded value.
    old_numpy = tuple(int(p) for p in np.__version__.split(".")[:2]) < (2, 4)
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "interpreter" in item.keywords and not old_numpy:
            item.add_marker(pytest.mark.skip(
                reason=f"Triton 3.6's interpreter needs numpy < 2.4 (have {np.__version__})"))
