"""The live monitor driven with Pilot on real demo runs: following the tail, keys that stop a job, finished runs."""

from __future__ import annotations

import pytest

from gpuwizard.preset import load_preset
from gpuwizard.runner.launch import prepare_run, start_run
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.logview import LogView
from gpuwizard.tui.monitor import MonitorScreen
from test_tui import SIZE, quick_demo, wait_until


@pytest.fixture(autouse=True)
def stop_leftover_runs():
    """A failed assertion must not leave a demo job training on a shared 2-core machine."""
    yield
    from gpuwizard.runner.follow import request_stop
    from gpuwizard.runner.rundir import list_runs

    for entry in list_runs():
        if entry.status is not None and not entry.status.final:
            request_stop(entry.run)


def at_tail(log: LogView) -> bool:
    """The pane shows the last line of the file it indexes, and there is more than one screenful."""
    return log.max_scroll_y > 0 and log.line_count == log.index.line_count and log.scroll_y == log.max_scroll_y


@pytest.mark.slow
@pytest.mark.parametrize("opened_by", ["ctrl+r", "gpuwizard run"])
async def test_a_freshly_opened_monitor_follows_the_tail_as_lines_arrive(tmp_path, opened_by):
    """The monitor opens on a run whose log is still empty: torchrun's wide banner lines arrive first (a
    horizontal scrollbar appears), then the first layout, then the steps; the pane stays on the newest line until
    the user scrolls away, and End follows again."""
    quick_demo(tmp_path, "follow", "trainer_options: {step_time_s: 0.05, log_every: 1}", steps=3000)
    run = start_run(prepare_run(load_preset("follow")))
    app = GpuWizardApp(preset=load_preset("follow")) if opened_by == "ctrl+r" else GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        if opened_by == "ctrl+r":
            app.open_monitor(run)  # what the wizard does once the run folder exists (resume replaces the screen)
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen.query("#log"), 30)
        log = app.screen.query_one("#log", LogView)
        assert await wait_until(pilot, lambda: log.index.line_count > 3 * log.size.height, 90)
        seen = log.index.line_count
        assert await wait_until(pilot, lambda: log.index.line_count > seen + 5 and at_tail(log), 30), (
            f"scroll {log.scroll_y} of {log.max_scroll_y}, {log.line_count} lines shown of {log.index.line_count}"
        )
        assert log.following
        await pilot.press("pageup")
        away, seen = log.scroll_y, log.index.line_count
        assert await wait_until(pilot, lambda: log.line_count > seen + 5, 30)
        assert not log.following and log.scroll_y == away < log.max_scroll_y, "scrolled away: the pane stays put"
        await pilot.press("end")
        seen = log.index.line_count
        assert await wait_until(pilot, lambda: log.index.line_count > seen + 5 and at_tail(log), 30), "End follows"
        await pilot.press("s", "y")
        assert await wait_until(pilot, lambda: app.screen.final, 60)
