"""Suite-wide settings, GPU and interpreter skips, and the seeded ``rng``.

Every random draw in the suite is seeded. A test takes ``rng`` (a numpy
``Generator``) or ``seed`` (an int); the seed is a stable hash of the test's node id
(``tests/test_x.py::test_y[param]``), the same on every run, machine and xdist
worker, or ``MLA_JAX_SEED`` when that is set. A failed test that used it says so in
its report: ``seed N (MLA_JAX_SEED=N to rerun)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.cases import SEED_ENV, SEED_KEY, seed_for, seed_from_env


def pytest_configure(config):
    import jax

    # The tests compare against exact references: float32 matmuls in full precision on
    # every device (XLA:GPU's default is TF32, ~1e-3 relative).
    jax.config.update("jax_default_matmul_precision", "highest")
    seed_from_env()  # a malformed MLA_JAX_SEED stops the run here, not in every test


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
            item.add_marker(
                pytest.mark.skip(
                    reason=f"Triton 3.6's interpreter needs numpy < 2.4 (have {np.__version__})"
                )
            )


# ------------------------------------------------------------------------ seeds


@pytest.fixture
def seed(request) -> int:
    """This test's seed (see the module docstring)."""
    return seed_for(request.node)


@pytest.fixture
def rng(seed) -> np.random.Generator:
    """A numpy Generator seeded with this test's ``seed``."""
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    # The test's own seed, else one a module-scoped fixture recorded on an ancestor.
    seeds = [n.stash[SEED_KEY] for n in reversed(item.listchain()) if SEED_KEY in n.stash]
    if not seeds:
        return
    note = f"seed {seeds[0]} ({SEED_ENV}={seeds[0]} to rerun)"
    longrepr = report.longrepr
    if hasattr(longrepr, "addsection"):  # a traceback: a section under it
        longrepr.addsection("mla-jax seed", note)
    elif isinstance(longrepr, str):
        report.longrepr = f"{longrepr}\n{note}"
    elif isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, message)
        path, line, message = longrepr
        report.longrepr = (path, line, f"{message}\n{note}")
    else:
        report.sections.append(("mla-jax seed", note))
