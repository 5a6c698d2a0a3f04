"""Offline, LeRobot's unmodified ACT preset fails building its ResNet (issue 39 item 5): the failure names the URL,
the cause (no network) and the fix, and a run that never reached step 1 is offered no resume.

The log is real: gpuwizard run of a copy of example-lerobot-act (LeRobot 0.6.1, torch 2.11, torchvision 0.26, 2 CPU
processes, so100_tiny) on a machine that resolves no host. torchvision's resnet18 builder fetches
ResNet18_Weights.IMAGENET1K_V1 through torch.hub.load_state_dict_from_url, which prints `Downloading: "URL" to PATH`
(torch 2.11 hub.py:889) and raises urllib's URLError; ACTConfig.pretrained_backbone_weights defaults to those weights
(lerobot 0.6.1 policies/act/configuration_act.py:99)."""

from __future__ import annotations

from gpuwizard.core.codes import RunState
from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runs.records import Expectations, Progress
from gpuwizard.runs.tail import LogTail
from gpuwizard.trainers.registry import get_trainer
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.widgets.fields import KeyBar
from support.data import DATA
from support.runs import copied_run
from support.tui import SIZE, monitor_on, recorded

LOG = DATA / "logs" / "lerobot061_act_offline_backbone.log"
URL = "https://download.pytorch.org/models/resnet18-f37072fd.pth"
FIX = '["--policy.pretrained_backbone_weights=null"]'


def failure():
    """The real log through the supervisor's own detector, line by line as it was written."""
    expect = Expectations(steps=40, lr=2e-5, warmup_steps=2, effective_batch=16, world_size=2, hang_timeout_s=300.0)
    monitor = JobMonitor(expect, get_trainer("lerobot"), now=0.0)
    events = []
    for n, line in enumerate(LogTail(LOG).read().lines):
        events += monitor.feed(line, now=float(n))
    (failed,) = [e for e in events if e.kind == "rank_failed"]
    return failed


def test_the_failure_names_the_url_the_cause_and_the_fix():
    failed = failure()
    assert failed.title == "rank 0 failed (exit code 1): no network to download resnet18-f37072fd.pth"
    assert failed.detail.startswith("This machine reaches no network (Name or service not known).")
    assert "urllib.error.URLError" in failed.detail, "the error as printed stays, for a search"
    assert failed.suggestion.startswith(f"Set launch.extra_args: {FIX}")
    assert URL in failed.suggestion and "/root/.cache/torch/hub/checkpoints/resnet18-f37072fd.pth" in failed.suggestion
    assert "smoke run" not in failed.suggestion and "Read the rank's traceback" not in failed.suggestion


async def test_at_80x24_the_banner_shows_the_fix_and_no_resume_is_offered(tmp_path):
    run = copied_run(tmp_path, state=RunState.FAILED, exit_code=1, steps=40, error="job exit code 1")
    run.write("progress.json", Progress(total=40))  # it never reached step 1
    run.append_line(run.events_file, failure())
    run.log.write_bytes(LOG.read_bytes())
    app = GpuWizardApp(run=run)
    toasts = recorded(app)
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        box = monitor.query_one("#banner")
        shown = " ".join(str(box.render()).split())
        assert "no network to download resnet18-f37072fd.pth" in shown
        assert "This machine reaches no network" in shown and f"next: Set launch.extra_args: {FIX}" in shown, shown
        assert "resume" not in str(box.border_subtitle) and "w wizard" in str(box.border_subtitle)
        assert "r Resume" not in str(monitor.query_one(KeyBar).render())
        assert monitor.check_action("resume", ()) is False
        assert toasts == [], "the banner says it: a toast of it covered half the log at 80x24 (issue 39 item 6)"
