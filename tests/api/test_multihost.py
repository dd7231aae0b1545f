"""The sharded decode across processes: ``scripts/multihost_decode.py`` run as local
CPU processes joined by ``jax.distributed`` (gloo collectives).

Each launch is one 4-device mesh spanning every process, in one of two layouts:
``2x2`` (2 processes of 2 simulated CPU devices) or ``4x1`` (4 processes of 1).
Every process builds its inputs from its own part with
``jax.make_array_from_process_local_data``, runs both schemes (one
``sharded_mla_decode`` step with the buffer donated, a jitted ``lax.scan`` with the
buffer and cache donated through ``sharded_append_latent``), and checks itself:
its shards bitwise against the unsharded program on each shard's inputs, the
gathered results (``process_allgather``) against the unsharded run of the whole
problem, shardings and donation. The tests assert on its JSON.

``MLA_JAX_MULTIHOST_LAYOUTS`` (comma-separated) says which layouts are launched.
The default, as in CI, is ``2x2``: it crosses process boundaries and has several
devices in a process, so it takes every path of the script and of ``mla_jax.sharded``
that ``4x1`` takes, in less than half its CPU time (2 processes, not 4).
``MLA_JAX_MULTIHOST_LAYOUTS=2x2,4x1`` launches both, and the two launches are then
also compared with each other: the same mesh size runs the same per-device
programs, so the results must be bitwise equal whichever process holds which
device. A test of a layout not launched is skipped, saying so.

DeepSeek generation (``scripts/multihost_generate.py``): ``mla_jax.deepseek.generate``
on a 4-device mesh of 2 processes, parameters replicated and prompts split on the
batch, against the same script run as one process on one device: the same tokens.

The launcher starts the processes itself, with a free port chosen by binding to
port 0 (tried once more on a collision), kills them all as soon as one fails or
the time runs out, and checks that the port is closed afterwards.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "multihost_decode.py"
GENERATE = REPO / "scripts" / "multihost_generate.py"
LAUNCH_TIMEOUT = 300.0  # seconds for one launch (80 s seen on a shared 2-core machine)
INIT_TIMEOUT = 60  # seconds each process waits for the others in initialize
SCHEMES = ("heads", "batch")
LAYOUTS = {"2x2": (2, 2), "4x1": (4, 1)}  # name: (processes, CPU devices each)
LAYOUTS_ENV = "MLA_JAX_MULTIHOST_LAYOUTS"
LAUNCHED = os.environ.get(LAYOUTS_ENV, "2x2").split(",")
if set(LAUNCHED) - set(LAYOUTS):
    raise ValueError(
        f"{LAYOUTS_ENV} must be a comma-separated subset of {sorted(LAYOUTS)}, "
        f"got {os.environ[LAYOUTS_ENV]!r}"
    )
# Printed by each process once every process has joined: "<script's stem>: joined:".
JOINED = "multihost_decode: joined:"
# A collision on the coordinator's port: process 0 cannot serve it. jax raises the
# first; gRPC logs the second (an error, shown at TF_CPP_MIN_LOG_LEVEL=2), and
# process 0 may then die of a signal before jax's error is printed.
PORT_TAKEN = ("Failed to start RPC server", "Failed to add port")


def free_port() -> int:
    """A port nothing listens on now (the coordinator binds it on every interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def port_is_closed(port: int) -> bool:
    """Nothing listens on ``port``: a connection is refused, and a bind that tolerates
    closed connections (TIME_WAIT) but not a listener succeeds."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        if s.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def _child_env() -> dict[str, str]:
    """This checkout's mla_jax first on the path, the CPU only, quiet XLA."""
    path = os.environ.get("PYTHONPATH", "")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), path) if p))
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def _run_once(
    num_processes: int,
    args: list[str],
    out: Path,
    port: int,
    timeout: float,
    extra: dict[int, list[str]],
    script: Path = SCRIPT,
) -> list[dict]:
    """Starts ``num_processes`` copies of ``script``; returns each one's rc, log and JSON."""
    out.mkdir(parents=True, exist_ok=True)
    logs, procs = [], []
    try:
        for i in range(num_processes):
            log = open(out / f"log-{i}.txt", "w")  # noqa: SIM115 (closed below)
            logs.append(log)
            command = [sys.executable, str(script), "--num-processes", str(num_processes),
                       "--process-id", str(i), "--coordinator", f"127.0.0.1:{port}",
                       "--init-timeout", str(INIT_TIMEOUT), "--out", str(out), *args,
                       *extra.get(i, [])]  # fmt: skip
            procs.append(subprocess.Popen(command, cwd=REPO, env=_child_env(), stdout=log,
                                          stderr=subprocess.STDOUT))  # fmt: skip
        deadline = time.monotonic() + timeout
        # Wait for all; one failure dooms the others (they would wait in a
        # collective for it), so stop them at once.
        while True:
            codes = [p.poll() for p in procs]  # every process, each time
            if None not in codes or any(c not in (None, 0) for c in codes):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait(timeout=30)
        for log in logs:
            log.close()
    results = []
    for i, p in enumerate(procs):
        path = out / f"results-{i}.json"
        results.append(
            {
                "rc": p.returncode,
                "log": (out / f"log-{i}.txt").read_text(),
                "json": json.loads(path.read_text()) if path.exists() else None,
            }
        )
    return results


def launch(
    num_processes: int,
    args: list[str],
    out: Path,
    timeout: float = LAUNCH_TIMEOUT,
    extra: dict[int, list[str]] | None = None,
    script: Path = SCRIPT,
) -> tuple[list[dict], int, Path]:
    """Runs ``script`` in ``num_processes`` processes, process ``i`` with ``args`` and
    ``extra[i]``; returns (results, port, the directory of their files).

    A port that was free when chosen can be taken before process 0 binds it: then
    process 0 fails before joining, and the launch is tried once more on a new port
    (so is any other launch whose process 0 failed before joining: once is cheap).
    """
    for attempt in range(2):
        port, directory = free_port(), out / f"try{attempt}"
        results = _run_once(num_processes, args, directory, port, timeout, extra or {}, script)
        if results[0]["rc"] == 0 or f"{script.stem}: joined:" in results[0]["log"]:
            break
    return results, port, directory


def _summary(results: list[dict]) -> str:
    return "\n".join(
        f"--- process {i}: rc {r['rc']}\n{r['log'][-4000:]}" for i, r in enumerate(results)
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The launched layouts, one after the other (each keeps both cores busy)."""
    out = {}
    for name in LAUNCHED:
        processes, devices = LAYOUTS[name]
        start = time.monotonic()
        results, port, directory = launch(
            processes,
            ["--local-device-count", str(devices), "--save-arrays"],
            tmp_path_factory.mktemp(name),
        )
        out[name] = {
            "results": results,
            "port": port,
            "dir": directory,
            "seconds": round(time.monotonic() - start, 1),
        }
    print("launch seconds:", {name: run["seconds"] for name, run in out.items()})
    return out


def _launched(runs: dict, layout: str) -> dict:
    """The run of ``layout``; the test is skipped if it was not launched."""
    if layout not in runs:
        pytest.skip(f"layout {layout} not launched ({LAYOUTS_ENV}={','.join(LAYOUTS)} launches it)")
    return runs[layout]


def _ok(run: dict) -> list[dict]:
    results = run["results"]
    assert all(r["rc"] == 0 and r["json"] for r in results), _summary(results)
    return [r["json"] for r in results]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_processes_join_one_mesh(runs, layout):
    processes, devices = LAYOUTS[layout]
    got = _ok(_launched(runs, layout))
    assert [r["process_id"] for r in got] == list(range(processes))
    for r in got:
        assert r["num_processes"] == processes and r["devices"] == processes * devices, r
        assert len(r["local_devices"]) == devices and r["platform"] == "cpu", r
        assert r["backend"] == "xla"
    # Every process sees its own devices only: no device is listed twice.
    listed = [d for r in got for d in r["local_devices"]]
    assert len(set(listed)) == len(listed) == processes * devices, listed


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_process_checks_its_shards_and_the_gathered_result(runs, layout, scheme):
    for r in _ok(_launched(runs, layout)):
        s = r["schemes"][scheme]
        assert all(s["checks"].values()), (r["process_id"], s)
        # Each of this process's devices, against the unsharded program on its inputs.
        assert len(s["per_shard"]) == LAYOUTS[layout][1]
        for diffs in s["per_shard"].values():
            assert set(diffs) == {"step_out", "step_lse", "outs", "lses", "kv"}
            assert all(v == 0.0 for v in diffs.values()), s["per_shard"]
        # The gathered result against the unsharded run of the whole problem.
        assert all(v <= 1e-5 for v in s["unsharded"].values()), s["unsharded"]
        assert all(s["donated"].values()), s["donated"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_process_gathers_the_same_result(runs, layout):
    got = _ok(_launched(runs, layout))
    for scheme in SCHEMES:
        digests = {json.dumps(r["schemes"][scheme]["digests"]) for r in got}
        assert len(digests) == 1, digests


def test_two_and_four_processes_agree_bitwise(runs):
    """The same 4-device mesh, split 2 x 2 or 4 x 1 over processes: same results."""
    for layout in LAYOUTS:
        _ok(_launched(runs, layout))
    a, b = (dict(np.load(runs[layout]["dir"] / "gathered.npz")) for layout in LAYOUTS)
    # step_out, step_lse, outs, lses, kv of each scheme, and of the unsharded run.
    assert set(a) == set(b) and len(a) == 5 * (len(SCHEMES) + 1), sorted(a)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), key


def test_no_port_left_open(runs):
    for run in runs.values():
        assert port_is_closed(run["port"]), run["port"]


def test_a_failing_process_stops_the_launch(tmp_path):
    """Process 1 exits at once (its --process-id is out of range); process 0, waiting
    for it in initialize, is killed by the launcher long before its own timeout."""
    start = time.monotonic()
    results, port, _ = launch(
        2, ["--local-device-count", "1"], tmp_path, extra={1: ["--process-id", "5"]}
    )
    assert time.monotonic() - start < INIT_TIMEOUT / 2
    assert all(r["rc"] != 0 for r in results), _summary(results)
    assert port_is_closed(port)


def test_a_taken_port_is_recognised(tmp_path):
    """What launch() retries on: process 0 cannot serve a port something listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        start = time.monotonic()
        results = _run_once(2, ["--local-device-count", "1"], tmp_path, port, 60.0, {})
    assert time.monotonic() - start < INIT_TIMEOUT / 2
    log = results[0]["log"]
    assert results[0]["rc"] != 0 and JOINED not in log, _summary(results)
    assert any(s in log for s in PORT_TAKEN), _summary(results)


def test_deepseek_generation_on_two_processes_matches_one_process(tmp_path):
    """A tiny DeepSeek-V3 (2 layers, one MoE) generates 8 greedy tokens for 4 ragged
    prompts, the batch split over a 4-device mesh of 2 processes: the gathered tokens
    equal those of ``generate`` in one process on one device, and so do the logits
    they came from, within rounding. One test, so one xdist worker runs it."""
    start = time.monotonic()
    # The reference runs beside the launch: its own process, no jax.distributed.
    reference_dir = tmp_path / "reference"
    with open(tmp_path / "reference-log.txt", "w") as log:
        reference = subprocess.Popen(
            [sys.executable, str(GENERATE), "--unsharded", "--out", str(reference_dir)],
            cwd=REPO, env=_child_env(), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            results, port, directory = launch(
                2, ["--local-device-count", "2"], tmp_path / "sharded", script=GENERATE
            )
            rc = reference.wait(timeout=LAUNCH_TIMEOUT)
        finally:
            if reference.poll() is None:
                reference.kill()
                reference.wait(timeout=30)
    seconds = round(time.monotonic() - start, 1)
    assert rc == 0, (tmp_path / "reference-log.txt").read_text()[-4000:]
    got = _ok({"results": results})
    want = json.loads((reference_dir / "results-0.json").read_text())
    assert want["unsharded"] and want["num_processes"] == 1, want

    for r in got:
        assert r["num_processes"] == 2 and r["mesh"] == {"dp": 4}, r
        assert len(r["local_devices"]) == 2 and r["platform"] == "cpu", r
        assert r["specs"] == {"tokens": "P('dp',)", "logits": "P('dp',)"}, r["specs"]
        assert r["prompt_lens"] == want["prompt_lens"]
        # Every process gathers the whole batch: the one-process tokens.
        assert r["tokens"] == want["tokens"], (r["process_id"], r["tokens"], want["tokens"])
    assert len({r["logits_digest"] for r in got}) == 1
    a, b = np.load(directory / "generated.npz"), np.load(reference_dir / "generated.npz")
    assert a["tokens"].shape == (4, 8) and np.array_equal(a["tokens"], b["tokens"])
    diff = float(np.abs(a["logits"] - b["logits"]).max())
    top2 = np.sort(b["logits"], axis=-1)[..., -2:]
    margin = float((top2[..., 1] - top2[..., 0]).min())
    print(f"generation: {seconds} s, max |logits diff| {diff:.2e}, smallest top-2 margin "
          f"{margin:.3f}, per process {[r['seconds'] for r in got]}")  # fmt: skip
    # Partitioned dots may round differently; a token changes only past its margin.
    assert diff <= 1e-4 < margin, (diff, margin)
    assert port_is_closed(port)
