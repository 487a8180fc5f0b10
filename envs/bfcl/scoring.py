"""BFCL's verdict on an episode, with BFCL's own checker functions wherever they can run without ``eval``.

* AST categories: the agent's calls go, as decoded model output ``[{name: arguments}]``, to bfcl_eval's
  ``ast_checker`` itself (allowed values, optional arguments, int for float, string normalisation,
  order-free parallel matching, Java/JavaScript type conversion).
* irrelevance / live_irrelevance: valid when the agent made no call; live_relevance: when it made one
  (BFCL's relevance runner, with "a call" meaning a call the env parsed).
* Multi-turn: BFCL's ``multi_turn_checker`` loop, re-done without ``eval``: the agent's executed calls and
  the ground truth are replayed turn by turn on two fresh worlds; after each turn with ground truth, the
  turn must have calls, ``state_checker`` (public attributes) and ``response_checker`` (the ground truth's
  results contained in all the agent's results so far) must pass. Both checkers are bfcl_eval's own.

A verdict is BFCL's result dict cut to JSON: ``{"valid", "error_type", "error"}``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from envace_gym.backends import LEDGER
from envace_gym.calls import ToolCall

from . import upstream
from .categories import category_kind
from .convert import ground_truth_turns
from .world import BFCLWorld, official_result

__all__ = ["verdict", "check_ast", "check_multi_turn", "UNFINISHED"]

UNFINISHED = {
    "valid": False,
    "error_type": "envace:unfinished",
    "error": "the episode ended before the last turn's answer",
}


def verdict(
    task: Any, attempted: Sequence[Sequence[ToolCall]], executed: Sequence[Sequence[ToolCall]], finished: bool
) -> dict[str, Any]:
    """BFCL's verdict on an episode of ``task``.

    Args:
        attempted: per user turn, every call the agent wrote that parsed (also those the env refused).
        executed: per user turn, the calls that ran (passed the fixed checks; they may have raised).
        finished: whether the agent answered the last turn (an unfinished episode fails, as BFCL fails a
            force-quit one).
    """
    if not finished:
        return dict(UNFINISHED)
    category = task.metadata["bfcl_category"]
    kind = category_kind(category)
    calls = [c for turn in attempted for c in turn]
    if kind == "irrelevance":
        if calls:
            return _fail("irrelevance_error:decoder_success", "a function was called when none should be")
        return {"valid": True}
    if kind == "relevance":
        return {"valid": True} if calls else _fail("relevance_error:decoder_failed", "no function was called")
    if kind == "ast":
        return check_ast(category, task.metadata["bfcl_id"], calls)
    return check_multi_turn(task, executed)


def _fail(error_type: str, error: Any) -> dict[str, Any]:
    return {"valid": False, "error_type": error_type, "error": _short(error)}


def _short(error: Any, limit: int = 2000) -> str:
    text = error if isinstance(error, str) else "; ".join(map(str, error)) if isinstance(error, list) else str(error)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_ast(category: str, entry_id: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """bfcl_eval's ``ast_checker`` on ``calls`` as the decoded model output of entry ``entry_id``."""
    entry = upstream.entry(category, entry_id)
    model_output = [{c.name: copy.deepcopy(c.arguments)} for c in calls]
    try:
        result = upstream.ast_checker().ast_checker(
            copy.deepcopy(entry["function"]),
            model_output,
            copy.deepcopy(upstream.ground_truth(category, entry_id)),
            upstream.language(category),
            category,
            upstream.CHECKER_MODEL_NAME,
        )
    except Exception as exc:  # noqa: BLE001 - BFCL's checker crashes on a few malformed entries
        return _fail("envace:checker_error", f"BFCL's checker raised {type(exc).__name__}: {exc}")
    if result.get("valid"):
        return {"valid": True}
    return _fail(result.get("error_type", "ast:invalid"), result.get("error", ""))


def check_multi_turn(task: Any, executed: Sequence[Sequence[ToolCall]]) -> dict[str, Any]:
    """BFCL's per-turn state and response checks on replayed calls (no ``eval``)."""
    meta = task.metadata
    checker = upstream.multi_turn_checker()
    long_context = bool(meta.get("long_context"))
    model = BFCLWorld(meta["involved_classes"], task.initial_state, long_context)
    truth = BFCLWorld(meta["involved_classes"], task.initial_state, long_context)
    model_results: list[str] = []
    for turn, gt_calls in enumerate(ground_truth_turns(task, truth)):
        agent_calls = executed[turn] if turn < len(executed) else []
        model_results.extend(official_result(model.call(c.name, c.arguments)) for c in agent_calls)
        gt_results = [official_result(truth.call(c.name, c.arguments)) for c in gt_calls]
        LEDGER.record("verifier", len(agent_calls) + len(gt_calls))  # replayed only to score the episode
        if not gt_calls:  # BFCL checks nothing on a turn whose ground truth is empty (the calls still ran)
            continue
        if not agent_calls:
            return _fail("multi_turn:empty_turn_model_response", f"Model response list is empty for turn {turn}")
        state = checker.state_checker(model.instances, truth.instances)
        if not state["valid"]:
            return _fail(state["error_type"], state["error_message"])
        response = checker.response_checker(model_results, gt_results, turn)
        if not response["valid"]:
            return _fail(response["error_type"], response["error_message"])
    return {"valid": True}
