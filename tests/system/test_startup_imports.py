"""Start-up stays light: heavy modules are imported only where they are used. Each check runs in a clean interpreter
of its own; the module starts them all at once (`answers`), so on two cores they take half the time of one after
another."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMAND = """
import sys
from gpuwizard import cli
try:
    cli.main({argv!r})
except SystemExit:
    pass
print(",".join(sorted(m for m in ("torch", "textual", "pynvml", "numpy", "pydantic") if m in sys.modules)))
"""
COMMANDS = [["--help"], ["plan", "demo-cpu"], ["preview", "so100-act-ddp2"], ["presets", "list"]]

CHECKS = {
    "import": (
        "import sys, gpuwizard, gpuwizard.cli; print([m for m in ('torch','textual','pynvml','msgspec','yaml') if "
        "m in sys.modules])"
    ),
    "wizard": (
        "import sys\nfrom unittest import mock\nfrom gpuwizard import cli\n"
        "with mock.patch('gpuwizard.tui.entry.has_terminal', return_value=True), "
        "mock.patch('gpuwizard.tui.app.GpuWizardApp.run') as started:\n"
        "    cli.main(['--preset', 'demo-cpu'])\n"
        "assert started.called\n"
        "print(','.join(sorted(m for m in ('pydantic', 'torch', 'pynvml', 'numpy', 'psutil', 'textual_plot', "
        "'gpuwizard.model.preset', 'gpuwizard.model.preset_sections', 'gpuwizard.model.preset_files', "
        "'gpuwizard.planning.plan', "
        "'gpuwizard.planning.scaling', 'gpuwizard.planning.checks') if m in sys.modules)))"
    ),
    "core": (
        "import sys, importlib, pkgutil, gpuwizard\n"
        "mods = [m.name for m in pkgutil.walk_packages(gpuwizard.__path__, 'gpuwizard.') if '.tui' not in m.name and "
        "'.demo' not in m.name and '.loopback' not in m.name and not m.name.endswith('__main__')]\n"
        "[importlib.import_module(m) for m in mods]\n"
        "print('textual' in sys.modules, 'torch' in sys.modules, len(mods))"
    ),
    "plan": (
        "import sys, io, contextlib\nfrom gpuwizard import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    cli.main(['plan', 'demo-cpu'])\n"
        "from gpuwizard.model.trainer_names import trainer_names\n"
        "print(','.join(sorted(n for n in trainer_names() if f'gpuwizard.trainers.{n}' in sys.modules)))"
    ),
    **{" ".join(argv): COMMAND.format(argv=argv) for argv in COMMANDS},
}
"""Each check's code, by name: what it prints is what its test reads."""


@pytest.fixture(scope="module")
def answers() -> dict[str, str]:
    """What each check printed, every clean interpreter started before the first is waited for."""
    started = {
        name: subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, code in CHECKS.items()
    }
    printed = {}
    for name, child in started.items():
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, f"{name}: {err}"
        printed[name] = out.strip()
    return printed


def test_import_gpuwizard_is_light(answers):
    assert answers["import"] == "[]"


@pytest.mark.parametrize("argv", COMMANDS)
def test_command_paths_never_import_torch_or_textual(answers, argv):
    last = answers[" ".join(argv)].splitlines()[-1:]
    loaded = set(filter(None, last[0].split(","))) if last else set()
    assert not loaded & {"torch", "textual", "numpy"}
    assert ("pydantic" in loaded) == (argv != ["--help"]), "presets are validated by pydantic; --help needs none of it"


def test_the_wizard_reaches_its_first_frame_without_pydantic_or_torch(answers):
    """`gpuwizard --preset X` up to the app's start imports no validation, tensor or NVML library (they load after the
    first frame); run_app once imported the run records (and pydantic) before the wizard could draw."""
    assert answers["wizard"].splitlines()[-1:] in ([""], []), answers["wizard"]


def test_core_never_imports_textual(answers):
    """The core package (everything outside tui/) must work without Textual, and imports no torch (demo/ and
    loopback/ run inside torch's processes, not gpuwizard's)."""
    textual, torch, count = answers["core"].split()
    assert (textual, torch) == ("False", "False") and int(count) > 20


def test_plan_imports_only_the_trainer_it_uses(answers):
    assert answers["plan"] == "demo"


def test_every_trainer_module_names_its_trainer():
    from gpuwizard.trainers.registry import get_trainer, trainer_names

    assert [get_trainer(name).name for name in trainer_names()] == list(trainer_names())
    assert set(trainer_names()) == {"lerobot", "groot", "openpi", "hf", "demo"}
