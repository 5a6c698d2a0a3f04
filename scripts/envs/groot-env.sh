#!/usr/bin/env bash
# Builds a CPU environment in which Isaac-GR00T's own command-line parser runs: its source at commit 626af89
# (main, 2026-05-26, N1.7; a .tar.gz in GPUWIZARD_GROOT_SOURCE, a path or URL, by default GitHub's archive of that
# commit) unpacked, plus the versions its uv.lock pins for the parser (tyro 0.9.17) and for the HF TrainingArguments it builds
# (transformers 4.57.3). No model, no CUDA, no DeepSpeed: training itself cannot run here.
# Usage: groot-env.sh [DIR]   (default $HOME/.cache/gpuwizard-groot). A minute or two the first time.
#
# What runs in it (checked):
#   cd DIR/Isaac-GR00T && DIR/venv/bin/python -c "import tyro; from gr00t.configs.finetune_config import \
#     FinetuneConfig; print(tyro.cli(FinetuneConfig, args=[...]))"
# gr00t.configs.finetune_config imports only dataclasses, so this is fast. The full launch script
# (gr00t/experiment/launch_finetune.py) imports wandb, the model and DeepSpeed: it does not start here.
set -eu
dir="${1:-$HOME/.cache/gpuwizard-groot}"
mkdir -p "$dir"
if [ ! -f "$dir/Isaac-GR00T/gr00t/configs/finetune_config.py" ]; then
  . "$(dirname "$0")/unpack.sh"
  unpack_source "${GPUWIZARD_GROOT_SOURCE:-https://github.com/NVIDIA/Isaac-GR00T/archive/626af89.tar.gz}" "$dir/Isaac-GR00T"
fi
if ! "$dir/venv/bin/python" -c "import tyro, transformers, torch" 2>/dev/null; then
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q torch==2.13.0 transformers==4.57.3 tyro==0.9.17 accelerate pyyaml 'numpy<2.3' omegaconf
fi
cat <<MSG
ready: GR00T source $dir/Isaac-GR00T (626af89), interpreter $dir/venv/bin/python
MSG
