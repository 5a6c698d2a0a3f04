#!/usr/bin/env bash
# Builds a CPU environment in which openpi's own code runs: its source at commit 15a9616a (main, 2026-06-15; a
# .tar.gz in GPUWIZARD_OPENPI_SOURCE, a path or URL, by default GitHub's archive of that commit) unpacked, and the
# versions its uv.lock pins (JAX 0.5.3 CPU, flax, optax, orbax, tyro 0.9.22, transformers 4.53.2 with openpi's
# patched files for the PyTorch models), torch 2.13.0 CPU instead of the pinned 2.7.1.
# Usage: openpi-env.sh [DIR]   (default $HOME/.cache/gpuwizard-openpi). About 10 minutes the first time.
#
# openpi pins a LeRobot git revision that no registry has; its data loader imports it at module
# level, so a stand-in module is put on the path: only the FakeDataConfig configs (`debug`, ...)
# can load data here. Checked here through real commands:
#   - scripts/train.py's tyro CLI (`_config.cli()`) parses every TrainConfig flag;
#   - `scripts/train.py debug --exp-name X --overwrite` trains on CPU JAX (1 device: ~16 min for 6
#     steps, 13.5 GB; 2 devices via XLA_FLAGS=--xla_force_host_platform_device_count=2 with
#     --fsdp-devices=2: ~4 min);
#   - `torchrun --nproc-per-node=2 scripts/train_pytorch.py debug ...` logs
#     "Using batch size per GPU: 2 (total batch size across 2 GPUs: 4)" and its LR schedule line,
#     then fails in upstream's fake-data path (float images not transposed for the vision encoder).
set -eu
dir="${1:-$HOME/.cache/gpuwizard-openpi}"
mkdir -p "$dir"
if [ ! -f "$dir/openpi/scripts/train.py" ]; then
  . "$(dirname "$0")/unpack.sh"
  unpack_source "${GPUWIZARD_OPENPI_SOURCE:-https://github.com/Physical-Intelligence/openpi/archive/15a9616a.tar.gz}" "$dir/openpi"
fi
if ! "$dir/venv/bin/python" -c "import jax, flax, optax, orbax.checkpoint, tyro, torch, transformers, openpi_client" 2>/dev/null; then
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q jax==0.5.3 jaxlib==0.5.3 flax==0.10.2 optax==0.2.4 orbax-checkpoint==0.11.13 \
    tensorstore==0.1.74 ml-dtypes==0.4.1 equinox==0.12.2 augmax==0.4.1 jaxtyping==0.2.36 beartype==0.19.0 \
    chex==0.1.90 numpy==1.26.4 tyro==0.9.22 etils==1.12.2 tqdm-loggable==0.2 numpydantic==1.6.9 \
    ml-collections==1.0.0 sentencepiece==0.2.0 wandb==0.19.11 einops==0.8.1 dm-tree==0.1.9 treescope==0.1.9 \
    typing-extensions==4.13.2 pillow==11.2.1 imageio==2.37.0 opencv-python-headless==4.11.0.86 polars==1.30.0 \
    rich==14.0.0 filelock fsspec==2025.3.0 pydantic==2.11.5 flatbuffers==25.2.10 transformers==4.53.2 \
    msgpack websockets torch==2.13.0
  "$dir/venv/bin/pip" install -q --no-deps "$dir/openpi/packages/openpi-client"
  site=$("$dir/venv/bin/python" -c "import site; print(site.getsitepackages()[0])")
  cp -r "$dir/openpi/src/openpi/models_pytorch/transformers_replace/"* "$site/transformers/"
fi
stub="$dir/stubs/lerobot/common/datasets"
if [ ! -f "$stub/lerobot_dataset.py" ]; then
  mkdir -p "$stub"
  touch "$dir/stubs/lerobot/__init__.py" "$dir/stubs/lerobot/common/__init__.py" "$stub/__init__.py"
  cat > "$stub/lerobot_dataset.py" <<'PY'
"""Stand-in: openpi pins a LeRobot revision no registry has. Only FakeDataConfig configs load data."""


class _Unavailable:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("LeRobot datasets are not available in this environment (stand-in module)")


LeRobotDataset = LeRobotDatasetMetadata = MultiLeRobotDataset = _Unavailable
PY
fi
cat <<MSG
ready: openpi source $dir/openpi (15a9616a), interpreter $dir/venv/bin/python
run from $dir/openpi with PYTHONPATH=src:packages/openpi-client/src:$dir/stubs
MSG
