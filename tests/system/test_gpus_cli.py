"""`gpuwizard gpus` and `plan` in a child process: the real NVML path without a driver, pynvml never imported
without the NVML library, and a recorded machine's setup advice in what `plan` and `preview` print."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuwizard.gpus.nvml import NO_DRIVER_LINE
from support.cli import gw_subprocess
from support.data import DATA, has_driver


def test_gpus_with_no_driver_real_nvml_path(tmp_path):
    """On a machine without the NVIDIA driver: exit 0, the clear line, an empty GPU list and the CPU inventory."""
    if has_driver():
        pytest.skip("this machine has an NVIDIA driver")
    text = gw_subprocess("gpus")
    assert text.returncode == 0 and "Traceback" not in text.stderr
    assert NO_DRIVER_LINE in text.stdout and "CPU:" in text.stdout
    as_json = gw_subprocess("gpus", "--json")
    assert as_json.returncode == 0
    data = json.loads(as_json.stdout)
    assert data["gpus"] == [] and data["links"] == []
    assert data["cpu"]["cores_logical"] >= 1 and data["cpu"]["memory_total_gb"] > 0
    assert data["message"] == NO_DRIVER_LINE


def test_without_the_nvml_library_pynvml_is_never_imported():
    """pynvml's own dlopen decides first, so driverless machines skip pynvml's import; with a driver NVML is read."""
    code = (
        "import sys\nfrom gpuwizard.gpus.inventory import read_inventory\nfrom gpuwizard.gpus.nvml import "
        "nvml_library_loads\n"
        "inventory = read_inventory()\nprint(nvml_library_loads(), 'pynvml' in sys.modules, inventory.message)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GPUWIZARD_NVML_REPLAY": ""},
    )
    loads, imported, message = out.stdout.strip().split(" ", 2)
    assert imported == loads
    if loads == "False":
        assert message == NO_DRIVER_LINE and not has_driver()


def test_plan_and_preview_carry_setup_advice_for_cuda_presets_only():
    """`gpuwizard plan` warns about the machine it would run on (P2P, busy GPU); a CPU preset gets no GPU advice."""
    env = {"GPUWIZARD_NVML_REPLAY": str(DATA / "nvml" / "workstation_2x4090.json")}
    cuda = gw_subprocess("plan", "so100-act-ddp2", env=env)
    assert cuda.returncode == 0, cuda.stderr
    assert "NCCL_P2P_DISABLE: 1" in cuda.stdout and "GPU 1 is busy with other processes: pid" in cuda.stdout
    preview = json.loads(gw_subprocess("preview", "so100-act-ddp2", "--format", "json", env=env).stdout)
    assert any("NCCL_P2P_DISABLE" in w for w in preview["warnings"])
    cpu = gw_subprocess("plan", "demo-cpu", env=env)
    assert cpu.returncode == 0 and "P2P" not in cpu.stdout and "busy" not in cpu.stdout
