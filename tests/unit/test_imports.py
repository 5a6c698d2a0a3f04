"""Start-up stays light: heavy modules are imported only where they are used."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
from gpuwizard import cli
try:
    cli.main({argv!r})
except SystemExit:
    pass
print(",".join(sorted(m for m in ("torch", "textual", "pynvml", "numpy", "pydantic") if m in sys.modules)))
"""


def loaded_after(argv: list[str]) -> set[str]:
    out = subprocess.run([sys.executable, "-c", CHECK.format(argv=argv)], capture_output=True, text=True, check=True)
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    return set(filter(None, last.split(",")))


def test_import_gpuwizard_is_light():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, gpuwizard, gpuwizard.cli; print([m for m in ('torch','textual','pynvml','msgspec','yaml') if "
            "m in sys.modules])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("argv", [["--help"], ["plan", "demo-cpu"], ["preview", "so100-act-ddp2"], ["presets", "list"]])
def test_command_paths_never_import_torch_or_textual(argv):
    loaded = loaded_after(argv)
    assert not loaded & {"torch", "textual", "numpy"}
    assert ("pydantic" in loaded) == (argv != ["--help"]), "presets are validated by pydantic; --help needs none of it"


def test_the_wizard_reaches_its_first_frame_without_pydantic_or_torch():
    """`gpuwizard --preset X` up to the app's start imports no validation, tensor or NVML library (they load after the
    first frame); run_app once imported the run records (and pydantic) before the wizard could draw."""
    code = (
        "import sys\nfrom unittest import mock\nfrom gpuwizard import cli\n"
        "with mock.patch('gpuwizard.tui.entry.has_terminal', return_value=True), "
        "mock.patch('gpuwizard.tui.app.GpuWizardApp.run') as started:\n"
        "    cli.main(['--preset', 'demo-cpu'])\n"
        "assert started.called\n"
        "print(','.join(sorted(m for m in ('pydantic', 'torch', 'pynvml', 'numpy', 'psutil', 'textual_plot', "
        "'gpuwizard.model.preset', 'gpuwizard.model.preset_sections', 'gpuwizard.model.preset_files', "
        "'gpuwizard.planning.plan', "
        "'gpuwizard.planning.scaling', 'gpuwizard.planning.checks') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1:] in ([""], []), out.stdout


def test_core_never_imports_textual():
    """The core package (everything outside tui/) must work without Textual, and imports no torch (demo/ and
    loopback/ run inside torch's processes, not gpuwizard's)."""
    code = (
        "import sys, importlib, pkgutil, gpuwizard\n"
        "mods = [m.name for m in pkgutil.walk_packages(gpuwizard.__path__, 'gpuwizard.') if '.tui' not in m.name and "
        "'.demo' not in m.name and '.loopback' not in m.name and not m.name.endswith('__main__')]\n"
        "[importlib.import_module(m) for m in mods]\n"
        "print('textual' in sys.modules, 'torch' in sys.modules, len(mods))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    textual, torch, count = out.stdout.split()
    assert (textual, torch) == ("False", "False") and int(count) > 20


def test_plan_imports_only_the_trainer_it_uses():
    code = (
        "import sys, io, contextlib\nfrom gpuwizard import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    cli.main(['plan', 'demo-cpu'])\n"
        "from gpuwizard.model.trainer_names import trainer_names\n"
        "print(','.join(sorted(n for n in trainer_names() if f'gpuwizard.trainers.{n}' in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "demo"


def test_every_trainer_module_names_its_trainer():
    from gpuwizard.trainers.registry import get_trainer, trainer_names

    assert [get_trainer(name).name for name in trainer_names()] == list(trainer_names())
    assert set(trainer_names()) == {"lerobot", "groot", "openpi", "hf", "demo"}
