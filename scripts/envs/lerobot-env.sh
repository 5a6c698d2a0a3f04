#!/usr/bin/env bash
# Builds a real LeRobot training environment (Python 3.12, the training extra) and a tiny
# local v3 dataset, for running lerobot-train on the CPU with 2 processes.
# Usage: lerobot-env.sh [--main] [DIR]
#   default        LeRobot 0.6.1, the PyPI release    (DIR default: $HOME/.cache/gpuwizard-lerobot)
#   --main         LeRobot main at commit 7427f31 (DIR default: $HOME/.cache/gpuwizard-lerobot-main):
#                  gradient accumulation, --parallelism.*, --accelerator.*, the accelerate-variable guard.
#                  Its source is the pip requirement in GPUWIZARD_LEROBOT_MAIN_SPEC, by default the upstream
#                  repository at that commit; a wheel built from it works too ('lerobot[training] @ file:///...whl').
# Takes several minutes the first time (the torch wheels are large); later runs return at once.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
flavour=release
if [ "${1:-}" = "--main" ]; then flavour=main; shift; fi
if [ "$flavour" = main ]; then
  dir="${1:-$HOME/.cache/gpuwizard-lerobot-main}"
  spec="${GPUWIZARD_LEROBOT_MAIN_SPEC:-lerobot[training] @ git+https://github.com/huggingface/lerobot@7427f31}"
else
  dir="${1:-$HOME/.cache/gpuwizard-lerobot}"
  spec="lerobot[training]==0.6.1"
fi
py312=$(ls -d "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python 2>/dev/null | head -1)
[ -n "$py312" ] || py312=$(command -v python3.12 || true)
[ -n "$py312" ] || { echo "no Python 3.12 found (lerobot needs >= 3.12)"; exit 1; }
mkdir -p "$dir"
if [ ! -x "$dir/venv/bin/lerobot-train" ]; then
  "$py312" -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q --upgrade pip
  "$dir/venv/bin/pip" install -q "$spec"
fi
HF_HUB_OFFLINE=1 "$dir/venv/bin/python" "$here/make_tiny_lerobot_dataset.py" "$dir/so100_tiny" >/dev/null 2>&1
cat <<MSG
lerobot: $("$dir/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("lerobot"))') ($flavour)
python:  $dir/venv/bin/python
dataset: $dir/so100_tiny   (repo id local/so100_tiny; 4 episodes x 40 frames, 6-dof, one 48x64 camera)
Run offline with HF_HUB_OFFLINE=1 WANDB_MODE=disabled, --policy.device=cpu,
--policy.push_to_hub=false and --policy.pretrained_backbone_weights=null (ACT would
otherwise download ResNet18 weights).
MSG
