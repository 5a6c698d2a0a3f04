"""Issue 27: the sweep's ETA, from the pace of the runs seen so far (the Sweep screen and `sweep status` show it)."""

from __future__ import annotations

from gpuwizard.runner.sweep_view import eta_text, sweep_eta


def test_the_sweep_eta_is_a_range_from_the_runs_seen_and_unknown_without_them():
    def row(state: str, elapsed: float | None = None, eta: float | None = None) -> dict:
        return {"state": state, "elapsed_s": elapsed, "eta_s": eta}

    running = [row("running", 10.0, 10.0), row("running", 10.0, 20.0)]
    assert sweep_eta([*running, row("queued"), row("queued")], 2) == (40.0, 50.0, 2)
    assert sweep_eta([row("finished", 30.0), row("running", 5.0, None), row("queued")], 1) == (55.0, 55.0, 1)
    assert sweep_eta([row("running", 3.0, None), row("queued")], 1) is None
    assert eta_text(None, 1) == "sweep ETA unknown (no run has gone far enough to judge)"
    assert eta_text((40.0, 50.0, 2), 2) == "sweep ETA 00:40-00:50 (2 runs' pace, 2 at a time)"
