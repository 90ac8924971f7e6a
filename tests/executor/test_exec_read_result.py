"""read_result: offered wherever the call it pages in could run, reads only its own session's
kept results, one limit's worth per call, through the executor's checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest

from geode.executor import MemoryResults, ToolExecutor
from geode.loop import TurnInfo
from geode.messages import ToolUseBlock
from geode.policy import Mode, session_scope
from geode.tools.base import ToolContext, tool
from geode.tools.builtin import read_result
from geode.tools.plan import BoundToolPlan

BIG = "".join(f"{i:05d}\n" for i in range(20_000))  # 120,000 characters


@tool
async def big(ctx: ToolContext) -> str:
    """A long result."""
    return BIG


@pytest.mark.parametrize("mode", get_args(Mode))
def test_read_result_is_in_scope_in_every_mode(mode: Any) -> None:
    assert session_scope(mode).refusal("read_result") is None


def test_a_channel_allow_list_need_not_name_it() -> None:
    scope = session_scope("DAEMON", channel_tools=["read_file"])
    assert scope.refusal("read_result") is None
    assert session_scope("DAEMON", channel_tools=[]).refusal("read_result") is not None


async def test_pages_of_its_own_session_only(tmp_path: Path) -> None:
    keeper = MemoryResults()
    plan = BoundToolPlan.build([big, read_result])

    def executor() -> ToolExecutor:
        return ToolExecutor(scope=session_scope("HEADLESS"), workspace=tmp_path,
                            max_result_chars=10_000, results=keeper)

    async def call(ex: ToolExecutor, sid: str, name: str, args: dict[str, Any]) -> Any:
        turn = TurnInfo(session_id=sid, turn_id="t", round=0, correlation_id="c",
                        mode="HEADLESS")
        (res,) = await ex.run_batch([ToolUseBlock(id=f"u-{name}", name=name, input=args)],
                                    turn=turn, plan=plan)
        return res

    cut = await call(executor(), "s-1", "big", {})
    assert cut.kept is not None and cut.kept.total_chars == len(BIG)
    rid = cut.kept.result_id
    page = await call(executor(), "s-1", "read_result",
                      {"result_id": rid, "offset": 8_000, "length": 50_000})
    assert page.text_content == BIG[8_000:18_000]  # capped at one limit's worth
    last = await call(executor(), "s-1", "read_result",
                      {"result_id": rid, "offset": len(BIG) - 7, "length": 100})
    assert last.text_content == BIG[-7:]
    other = await call(executor(), "s-2", "read_result", {"result_id": rid})
    assert other.is_error and "unknown result id" in other.text_content
    past = await call(executor(), "s-1", "read_result", {"result_id": rid,
                                                         "offset": len(BIG)})
    assert past.is_error and "past the end" in past.text_content
