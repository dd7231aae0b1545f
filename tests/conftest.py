"""Suite-wide settings, GPU and interpreter skips, how xdist shares the tests out,
the interpreter ``pool``, and the seeded ``rng``.

Every random draw in the suite is seeded. A test takes ``rng`` (a numpy
``Generator``) or ``seed`` (an int); the seed is a stable hash of the test's node id
(``tests/api/test_x.py::test_y[param]``), the same on every run, machine and xdist
worker, or ``MLA_JAX_SEED`` when that is set. A failed test that used it says so in
its report: ``seed N (MLA_JAX_SEED=N to rerun)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.cases import SEED_ENV, SEED_KEY, seed_for, seed_from_env

# On a machine without a GPU, XLA:CPU's LLVM backend at -O0: compiling is most of the
# suite's time there (the demo's decode loop took 10.6 s to compile at the default
# level, 4.3 s at 0), and the programs the tests run are small. Set here, before any
# test imports JAX, so the workers and the processes tests start inherit it.
if not os.path.exists("/dev/nvidiactl") and "xla_backend_optimization_level" not in (
    os.environ.get("XLA_FLAGS", "")
):
    os.environ["XLA_FLAGS"] = " ".join(
        filter(None, [os.environ.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"])
    )

if TYPE_CHECKING:
    from multiprocessing.pool import Pool

    from xdist.remote import Producer
    from xdist.scheduler import LoadScopeScheduling


def pytest_configure(config):
    import jax

    # The tests compare against exact references: float32 matmuls in full precision on
    # every device (XLA:GPU's default is TF32, ~1e-3 relative).
    jax.config.update("jax_default_matmul_precision", "highest")
    seed_from_env()  # a malformed MLA_JAX_SEED stops the run here, not in every test


@pytest.fixture
def ptx_in_calls(monkeypatch):
    """Kernel calls carry their PTX (as for a jaxlib before 0.11.2, which compiles it)
    for the test to read, whatever the installed jaxlib. JAX's caches are cleared
    around it: a module lowered before would be reused as it was."""
    import jax

    from mla_jax import _launch

    jax.clear_caches()
    monkeypatch.setattr(_launch, "JAXLIB_LOADS_MODULE_IMAGE", False)
    yield
    jax.clear_caches()


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


# ------------------------------------------------------------------------ xdist

# Modules whose tests share work too costly to do twice: a module-scoped fixture (the
# process launches of multihost and sharded, deepseek's models and generations, the
# bench dry run) or compilations (the demo's in-process runs). Each is one xdist work
# unit, so one worker does that work once.
WHOLE_MODULES = frozenset(
    {
        "tests/api/test_multihost.py",
        "tests/api/test_sharded.py",
        "tests/model/test_deepseek.py",
        "tests/tools/test_bench.py",
        "tests/tools/test_demo.py",
    }
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadScopeScheduling | None:
    """Under ``-n`` (``--dist load``, the default there), xdist's load balancing test
    by test, except that each module of ``WHOLE_MODULES`` goes to one worker whole.
    Work units go out by their number of tests (xdist's ``--loadscope-reorder``):
    those modules first, then single tests in collection order. An explicit other
    ``--dist`` is left alone. (Not ``--dist loadgroup`` with ``xdist_group`` marks:
    under pytest 9.2, xdist 3.8 ignores the marks, pytest-dev/pytest-xdist#1386.)"""
    if config.getvalue("dist") != "load":
        return None
    missing = sorted(m for m in WHOLE_MODULES if not (config.rootpath / m).is_file())
    if missing:  # a module moved or renamed, and its tests would be shared out
        raise pytest.UsageError(f"conftest.WHOLE_MODULES names no file: {missing}")
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in WHOLE_MODULES else nodeid

    return Scheduling(config, log)


# ------------------------------------------------------------------ interpreter


@pytest.fixture(scope="session")
def pool() -> Iterator[Pool]:
    """The Triton-interpreter workers (``tests.interpreted``) every interpreted test
    submits ``run`` to: started once per test process, as each worker takes seconds
    to import torch and triton. One worker under xdist, which already runs a test
    process per core; two otherwise, so that the fuzz's problems run two at a time."""
    from tests.interpreted import interpreter_pool

    with interpreter_pool(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2) as workers:
        yield workers


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
