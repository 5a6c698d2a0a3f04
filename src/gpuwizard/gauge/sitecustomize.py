"""Loaded by every Python of a gauged job (its folder is first on PYTHONPATH): starts the gauge in the training ranks,
then runs the `sitecustomize` the environment itself has, which this file would otherwise hide."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))


def chain() -> None:
    """Run the next `sitecustomize` on sys.path (a conda or distro one) as if this file were not there: it runs as
    `sys.modules["sitecustomize"]` and stays there, so code that reads or imports its own module finds it."""
    rest = [p for p in sys.path if os.path.realpath(p or ".") != HERE]  # this folder, however it is spelled
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if ours is not None:
            sys.modules["sitecustomize"] = ours  # site reports its failure, as it would without the gauge
        raise


def start() -> None:
    """The gauge in every process of the job: it waits for torch's own modules and writes only at optimizer steps, so
    torchrun's agent and data-loader workers, which take none, leave no line."""
    if not os.environ.get("GPUWIZARD_GAUGE_FILE"):
        return
    try:
        importlib.import_module("gwgauge").install()
    except Exception as exc:  # the gauge must never stop a run from training
        sys.stderr.write(f"[gpuwizard gauge] not started: {exc!r}\n")


start()
chain()
