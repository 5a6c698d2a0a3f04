"""Driving the Textual app with Pilot: terminal sizes, settling workers, typing, moving between steps, waiting."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
import textual._doc
from textual.widgets import Input
from textual.worker import WorkerCancelled

from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.monitor.screen import MonitorScreen
from gpuwizard.tui.widgets.fields import KeyBar

SIZE = (80, 24)
SIZES = [(80, 24), (120, 40)]


async def settle(pilot, app) -> None:
    """Let the replan debounce fire and workers (GPU detection, planning) finish and post."""
    for _ in range(3):
        await pilot.pause(0.15)
        try:
            await app.workers.wait_for_complete()
        except WorkerCancelled:  # an exclusive replan replaced by a newer one, as designed
            pass
    await pilot.pause()


async def type_into(pilot, selector: str, text: str) -> None:
    widget = pilot.app.screen.query_one(selector, Input)
    widget.focus()
    await pilot.pause()
    await pilot.press("end", *(["backspace"] * len(widget.value)), *list(text))
    await settle(pilot, pilot.app)


async def goto(pilot, app, step: int) -> None:
    for _ in range(10):
        if app.screen.step == step:
            break
        await pilot.press("ctrl+n" if app.screen.step < step else "escape")
        await pilot.pause()
    await settle(pilot, app)
    assert app.screen.step == step


async def wait_until(pilot, predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.3)
    return False


async def monitor_on(pilot, app) -> MonitorScreen:
    assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen.status is not None, 30)
    await pilot.pause()
    return app.screen


def recorded(app: GpuWizardApp) -> list[str]:
    """Every toast the app shows from now on (the real notify still runs)."""
    seen: list[str] = []
    notify = app.notify

    def record(message: str, **kw):
        seen.append(message)
        return notify(message, **kw)

    app.notify = record  # type: ignore[method-assign]
    return seen


def text_of(widget) -> str:
    return str(widget.render())


def key_bar_fits(screen) -> str:
    bar = screen.query_one(KeyBar)
    text = text_of(bar)
    assert bar.size.height == 1 and len(text) <= bar.content_region.width, f"{type(screen).__name__}: {text!r}"
    assert text.endswith(("? Keys", "f1 Keys")), "the help key is always shown"
    return text


def folder_shown_as(shown: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new folder of the test's own, beside `shown` and named as long as it, that snapshots show as `shown`: a screen
    that shows its path wraps as the stored SVG did, and two checkouts never share it (the caller removes it)."""
    fixed = Path(shown)
    folder = fixed.with_name(fixed.name[:-8] + secrets.token_hex(4))
    folder.mkdir()
    take = textual._doc.take_svg_screenshot  # what pytest-textual-snapshot looks up at every compare

    def screenshot(*args, **kwargs) -> str:
        return take(*args, **kwargs).replace(str(folder), shown)

    monkeypatch.setattr(textual._doc, "take_svg_screenshot", screenshot)
    return folder
