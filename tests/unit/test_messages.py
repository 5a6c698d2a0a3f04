"""The workers' messages: those that carry a whole new state replace a pending one of their kind in a screen's
queue; those that carry increments never do (a dropped RunPolled would lose log lines and events)."""

from __future__ import annotations

import asyncio

from textual.app import App

from gpuwizard.tui.base import messages
from gpuwizard.tui.base.messages import (
    DoctorChecked,
    InventoryReady,
    RunPolled,
    RunsLoaded,
    RunStarted,
    SearchDone,
    TrainerChecked,
)


def test_new_state_replaces_its_own_kind_only():
    assert RunsLoaded([{"run_id": "b"}]).can_replace(RunsLoaded([{"run_id": "a"}]))
    assert TrainerChecked("k2", None).can_replace(TrainerChecked("k1", None, "older"))
    assert DoctorChecked("k2", None).can_replace(DoctorChecked("k1", None, "older"))
    assert not RunsLoaded([]).can_replace(SearchDone("x", 3))
    assert not RunPolled(None, 2).can_replace(RunPolled(None, 1))  # type: ignore[arg-type]  # no follower here
    assert not RunStarted(None, "refused", []).can_replace(RunStarted(None, "refused", []))


def test_every_message_is_a_dataclass_and_says_whether_it_coalesces():
    kinds = [v for v in vars(messages).values() if isinstance(v, type) and v.__module__ == messages.__name__]
    posted = [k for k in kinds if k is not messages.NewState]
    assert len(posted) == 18 and all("__dataclass_fields__" in vars(k) for k in posted)
    once = {k.__name__ for k in posted if not issubclass(k, messages.NewState)}
    assert once == {"RunStarted", "RunPolled", "SweepDone", "SweepStarted", "OpenSweep"}, "results and requests"


async def test_a_busy_screen_handles_only_the_newest_state():
    """Three inventories queued back to back reach the handler as one, the newest; three polls arrive as three."""
    seen: list[object] = []
    polled: list[int] = []

    class Probe(App):
        def on_inventory_ready(self, message: InventoryReady) -> None:
            seen.append(message.inventory)

        def on_run_polled(self, message: RunPolled) -> None:
            polled.append(message.line_count)

    app = Probe()
    async with app.run_test() as pilot:
        for n in range(3):
            app.post_message(InventoryReady(n))  # type: ignore[arg-type]  # any payload: only the queue is tested
        for n in range(3):
            app.post_message(RunPolled(None, n))  # type: ignore[arg-type]  # likewise
        await pilot.pause()
        for _ in range(200):
            if seen and len(polled) == 3:
                break
            await asyncio.sleep(0.05)
    assert seen == [2] and polled == [0, 1, 2]
