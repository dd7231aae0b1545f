"""Counting the kernel launches of a timed chain: the Triton custom calls in a lowered
module (and which of them reach its outputs) or in a compiled executable, so that the
bench times only chains whose every call's kernels XLA kept (``ChainCheckError``)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import NamedTuple

import mla_jax


class ChainCheckError(RuntimeError):
    """A timed chain that would not run every call's work: the bench stops on it."""


def _any_of(targets: Sequence[str]) -> str:
    return "(?:" + "|".join(re.escape(t) for t in targets) + ")"


def compiled_custom_calls(
    hlo_text: str, targets: Sequence[str] = (mla_jax.KERNEL_CALL_TARGET,)
) -> int:
    """Custom calls to any of ``targets`` (by default, each a Triton kernel's launch) in
    a compiled executable's HLO text (``as_text()``)."""
    return len(re.findall(rf'custom_call_target="{_any_of(targets)}"', hlo_text))


class CustomCalls(NamedTuple):
    """Custom calls of a lowered module, each call site of a function counted."""

    total: int
    reaching_return: int  # those with a result that flows into the module's outputs


_STRING = re.compile(r'"[^"]*"')  # MLIR escapes quotes inside strings as \22
_NAME = re.compile(r"%[\w$]+(?:#\d+)?")  # a value, or result k of an op: %3#k
_FUNC = re.compile(r"^\s*func\.func\s+(?:public\s+|private\s+)?@([\w.$]+)\((.*)$")
_DEF = re.compile(r"^\s*(%[\w$]+(?::\d+)?(?:\s*,\s*%[\w$]+(?::\d+)?)*)\s*=\s")
_CALL = re.compile(r"\b(?:func\.)?call\s+@([\w.$]+)\(([^)]*)\)")


def _functions(module_text: str) -> dict[str, tuple[list[str], list[str]]]:
    """``{name: (parameter names, body lines)}`` of a StableHLO module's text."""
    funcs: dict[str, tuple[list[str], list[str]]] = {}
    body: list[str] = []
    for line in module_text.splitlines():
        header = _FUNC.match(_STRING.sub('""', line))
        if header:
            params = re.findall(r"(%[\w$]+):", header[2].split("->")[0])
            body = []
            funcs[header[1]] = (params, body)
        else:
            body.append(line)
    return funcs


def stablehlo_custom_calls(
    module_text: str, targets: Sequence[str] = (mla_jax.KERNEL_CALL_TARGET,)
) -> CustomCalls:
    """Counts the custom calls to any of ``targets`` in a lowered module (``Lowered.as_text()``)
    and those whose results reach ``@main``'s return.

    A walk over the SSA values: every function is instantiated per call site (a
    function shared by K call sites holds K custom calls, each live or dead on its
    own), a call's result k is the callee's returned value k, any other op's results
    depend on all its operands and are live together (as XLA keeps a custom call
    whole), and a region's ``stablehlo.return`` feeds the op that holds the region.
    Conservative in the direction of liveness, exact for straight-line code such as
    ``timed_chain``.
    """
    funcs = _functions(module_text)
    any_target = _any_of(targets)
    is_call = re.compile(rf'custom_call\s+@{any_target}\b|call_target_name\s*=\s*"{any_target}"')
    deps: dict[tuple, set] = {}  # node -> the nodes it is computed from
    calls_found: list[tuple] = []
    counter = itertools.count()

    def results_of(lhs: str) -> list[str]:
        """The references an op's left-hand side defines: ``%3:2`` gives %3#0, %3#1."""
        refs = []
        for name, count in re.findall(r"(%[\w$]+)(?::(\d+))?", lhs):
            refs += [f"{name}#{k}" for k in range(int(count))] if count else [name]
        return refs

    def instantiate(name: str, args: list[tuple]) -> list[tuple]:
        params, lines = funcs[name]
        inst = next(counter)
        env = dict(zip(params, args, strict=True))
        # A name no line defines (a block argument, a while's iter_arg) is a node of its own.
        node = lambda ref: env.setdefault(ref, (inst, ref))
        enclosing: list[tuple[int, tuple]] = []  # (indent, node) of ops that may hold regions
        returned: list[tuple] = []
        for raw in lines:
            line = _STRING.sub('""', raw)
            indent = len(line) - len(line.lstrip())
            text = line.strip()
            if not text or text.startswith(("}", "^")) or re.fullmatch(r"[\w.]+\s*\{", text):
                continue  # a region's brackets, its block's label, "cond {", "} do {"
            while enclosing and enclosing[-1][0] >= indent:
                enclosing.pop()
            if text.startswith(("return ", "func.return ")) or text == "return":
                returned = [node(n) for n in _NAME.findall(text.split(" : ")[0])]
                continue
            if text.startswith("stablehlo.return") and enclosing:
                deps[enclosing[-1][1]].update(node(n) for n in _NAME.findall(text))
                continue
            match = _DEF.match(line)
            rhs = line[match.end() :] if match else text
            results = results_of(match[1]) if match else []
            call = _CALL.search(rhs)
            if call and call[1] in funcs:
                callee_returns = instantiate(call[1], [node(n) for n in _NAME.findall(call[2])])
                for ref, value in zip(results, callee_returns, strict=True):
                    env[ref] = (inst, ref)
                    deps[(inst, ref)] = {value}
                continue
            op = (inst, results[0] if results else f"<op {next(counter)}>")
            for ref in results:
                env[ref] = op
            deps.setdefault(op, set()).update(node(n) for n in _NAME.findall(rhs))
            if is_call.search(raw):
                calls_found.append(op)
            enclosing.append((indent, op))
        return returned

    params, _ = funcs["main"]
    live, todo = set(), instantiate("main", [("main", p) for p in params])
    while todo:
        n = todo.pop()
        if n not in live:
            live.add(n)
            todo.extend(deps.get(n, ()))
    return CustomCalls(len(calls_found), sum(op in live for op in calls_found))


def check_chain_calls(path: str, found: int, calls: int, per_call: int, where: str) -> None:
    """Raises ``ChainCheckError`` unless ``found`` is ``per_call`` Triton custom calls
    per call (``kernels_per_call``)."""
    if found != per_call * calls:
        kernels = "stage 1 and stage 2" if per_call == 2 else "stage 1 alone"
        raise ChainCheckError(
            f"{path}: the timed chain of {calls} mla_decode calls has {found} live "
            f"kernel launches ({mla_jax.KERNEL_CALL_TARGET} custom calls) "
            f"{where}, not {per_call * calls} ({kernels} per "
            "call), so its time would miss work that XLA deleted. Every call's results must "
            "be outputs of the chain (bench.timed_chain)."
        )
