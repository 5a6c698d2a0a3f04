"""The repository, its recorded test data (tests/data) and NVML: a recorded machine replayed, or the real driver; the
demo's noise task's known answer."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
DATA = TESTS / "data"
REPO = TESTS.parent


def replay(monkeypatch, name: str) -> Path:
    """Replay the recorded machine tests/data/nvml/NAME.json in place of the real NVML."""
    path = DATA / "nvml" / f"{name}.json"
    monkeypatch.setenv("GPUWIZARD_NVML_REPLAY", str(path))
    return path


def has_driver() -> bool:
    """Whether this machine's real NVML starts (an NVIDIA driver is loaded)."""
    from gpuwizard.gpus.nvml import import_pynvml

    try:
        nv = import_pynvml()
        nv.nvmlInit()
        nv.nvmlShutdown()
        return True
    except Exception:
        return False


def noise_truth(dim: int, sigma: float, offset: float) -> float:
    """B_simple of the demo's noise task at |w - w*| = offset: gpuwizard/demo/noise.py's closed_form, written out so
    the fast loop need not import the demo's torch (tests/trainers/test_demo.py holds it to the demo's own)."""
    return (dim + 1) + sigma**2 * dim / offset**2
