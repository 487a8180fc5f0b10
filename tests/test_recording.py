"""ReferenceRecorder: reference results come from running the real tools, state carries across steps."""

import pytest

from envace_gym import RefTurn, ToolCall, Toolkit, tool
from envace_gym.backends import PythonBackend
from envace_gym.recording import ReferenceCallError, ReferenceRecorder


class Counter(Toolkit):
    run_inline = True

    @tool
    def add(self, n: int) -> dict:
        """Add to the counter.

        Args:
            n: How much to add.
        """
        if n < 0:
            raise ValueError("n must be >= 0")
        self.state["total"] += n
        return {"total": self.state["total"]}


def test_results_come_from_execution_and_state_carries_across_steps():
    state = {"total": 5}
    rec = ReferenceRecorder(Counter, state, backend_name="test/counter-rec")
    assert rec.step(("add", {"n": 2})) == [{"total": 7}]
    assert rec.step(("add", {"n": 1}), ToolCall("add", {"n": 10})) == [{"total": 8}, {"total": 18}]  # parallel
    turn = rec.turn("The total is 18.", contains=["18"])
    assert isinstance(turn, RefTurn) and turn.answer_contains == ("18",)
    assert [[c.result for c in step] for step in turn.steps] == [[{"total": 7}], [{"total": 8}, {"total": 18}]]
    assert rec.state == {"total": 18} and state == {"total": 5}  # the caller's state is not touched
    second = rec.turn("Nothing more.")  # a new turn starts empty
    assert second.steps == () and rec.turns == [turn, second]
    task = rec.build(id="t", user_turns=["add", "done?"], reward=["state_match"])
    assert task.initial_state == {"total": 5} and task.backend == "test/counter-rec"
    assert task.reference == (turn, second) and [t["function"]["name"] for t in task.tools] == ["add"]


def test_a_backend_factory_works_too():
    rec = ReferenceRecorder(lambda: PythonBackend(Counter, timeout=None), {"total": 0})
    assert rec.step(("add", {"n": 3})) == [{"total": 3}]
    rec.turn("3")
    with pytest.raises(ValueError, match="Toolkit class and backend_name"):
        rec.build(id="t", user_turns=["x"], reward=["call_match"])


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (("add", {"n": -1}), r"reference call add\(\{\"n\": -1\}\) failed: .*n must be >= 0"),
        (("nope", {}), r"reference call nope\(\{\}\) failed: .*nope"),
        (("add", {"n": "x"}), r"reference call add\(\{\"n\": \"x\"\}\) failed"),
    ],
)
def test_a_failing_call_raises_naming_the_call(call, says):
    rec = ReferenceRecorder(Counter, {"total": 0})
    with pytest.raises(ReferenceCallError, match=says):
        rec.step(call)


def test_steps_left_open_refuse_to_build():
    rec = ReferenceRecorder(Counter, {"total": 0}, backend_name="x")
    rec.step(("add", {"n": 1}))
    with pytest.raises(ValueError, match="every user turn must end"):
        rec.build(id="t", user_turns=["x"], reward=["call_match"])
