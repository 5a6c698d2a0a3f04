#!/usr/bin/env bash
# Builds (or reuses) the real trainer environments the trainer tests need, cached outside the checkout
# (default $HOME/.cache/gpuwizard-*; GPUWIZARD_ENV_CACHE overrides), and prints `export` lines for them:
#   GPUWIZARD_LEROBOT_PYTHON       LeRobot 0.6.1 (PyPI), Python 3.12, its training extra, a tiny local dataset
#   GPUWIZARD_LEROBOT_MAIN_PYTHON  LeRobot main at 7427f31 (GPUWIZARD_LEROBOT_MAIN_SPEC: a pip requirement)
#   GPUWIZARD_LEROBOT_EXTRAS       a PYTHONPATH folder with the packages of lerobot[xvla,pi,smolvla,diffusion]
#                                  (transformers, diffusers, num2words), kept out of both LeRobot venvs, which
#                                  therefore show a missing extra the way a user's plain lerobot[training] does
#   GPUWIZARD_GROOT_DIR            Isaac-GR00T 626af89 (GPUWIZARD_GROOT_SOURCE: a .tar.gz) with tyro 0.9.17 and
#                                  transformers 4.57.3
#   GPUWIZARD_OPENPI_DIR           openpi 15a9616a (GPUWIZARD_OPENPI_SOURCE: a .tar.gz) on CPU JAX 0.5.3, torch 2.13.0
#   GPUWIZARD_HF_PYTHON            transformers 5.24.0 + accelerate on torch 2.13.0 (CPU), for the HF Trainer
# The sources default to the public upstream (PyPI; GitHub at the pinned commits); set the three variables to local
# copies to build offline. The recipes are scripts/envs/*-env.sh (each builds into DIR and returns at once when it
# is already built). Usage: trainer-envs.sh [lerobot lerobot-main lerobot-extras groot openpi hf]  (default: all;
# lerobot-extras needs lerobot).
# A new machine: about 25 minutes in all, mostly downloads; a built cache: seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${GPUWIZARD_ENV_CACHE:-$HOME/.cache}"
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(lerobot lerobot-main lerobot-extras groot openpi hf)
log="$cache/gpuwizard-env-logs"
mkdir -p "$log"

build() {  # name, command...: quiet unless it fails
  local name=$1; shift
  local started=$SECONDS
  if ! "$@" >"$log/$name.log" 2>&1; then
    echo "trainer-envs: building $name failed; the last lines of $log/$name.log:" >&2
    tail -20 "$log/$name.log" >&2
    exit 1
  fi
  echo "trainer-envs: $name ready ($((SECONDS - started)) s)" >&2
}

lerobot_extras() {  # dir, python: the overlay, resolved with pip for lerobot 0.6.1 and main's pins (Python 3.12)
  local dir=$1 python=$2
  if ! PYTHONPATH="$dir/site" "$python" -c "import transformers, diffusers, num2words" 2>/dev/null; then
    rm -rf "$dir/site"
    "$python" -m pip install -q --no-deps --target "$dir/site" transformers==5.5.4 diffusers==0.39.0 \
      num2words==0.5.14 tokenizers==0.22.2 docopt==0.6.2 regex==2026.11.19 importlib_metadata==10.2.0 \
      lazy-importer==0.1.0 zipp==4.1.2 typer==0.29.2 annotated-doc==0.0.7 rich==15.0.0 Pygments==2.21.0 \
      markdown-it-py==4.3.0 mdurl==0.1.2 shellingham==1.5.4
  fi
}

hf_env() {
  local dir=$1
  if ! "$dir/venv/bin/python" -c "import transformers, accelerate, torch" 2>/dev/null; then
    python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install -q torch==2.13.0 transformers==5.24.0 accelerate==1.15.0 'numpy<2.3'
  fi
}

for name in "${wanted[@]}"; do
  case $name in
    lerobot)
      build lerobot bash "$here/envs/lerobot-env.sh" "$cache/gpuwizard-lerobot"
      echo "export GPUWIZARD_LEROBOT_PYTHON=$cache/gpuwizard-lerobot/venv/bin/python" ;;
    lerobot-main)
      build lerobot-main bash "$here/envs/lerobot-env.sh" --main "$cache/gpuwizard-lerobot-main"
      echo "export GPUWIZARD_LEROBOT_MAIN_PYTHON=$cache/gpuwizard-lerobot-main/venv/bin/python" ;;
    lerobot-extras)
      mkdir -p "$cache/gpuwizard-lerobot-extras"
      build lerobot-extras lerobot_extras "$cache/gpuwizard-lerobot-extras" "$cache/gpuwizard-lerobot/venv/bin/python"
      echo "export GPUWIZARD_LEROBOT_EXTRAS=$cache/gpuwizard-lerobot-extras/site" ;;
    groot)
      build groot bash "$here/envs/groot-env.sh" "$cache/gpuwizard-groot"
      echo "export GPUWIZARD_GROOT_DIR=$cache/gpuwizard-groot" ;;
    openpi)
      build openpi bash "$here/envs/openpi-env.sh" "$cache/gpuwizard-openpi"
      echo "export GPUWIZARD_OPENPI_DIR=$cache/gpuwizard-openpi" ;;
    hf)
      mkdir -p "$cache/gpuwizard-hf"
      build hf hf_env "$cache/gpuwizard-hf"
      echo "export GPUWIZARD_HF_PYTHON=$cache/gpuwizard-hf/venv/bin/python" ;;
    *)
      echo "trainer-envs: unknown environment $name (lerobot, lerobot-main, lerobot-extras, groot, openpi, hf)" >&2
      exit 2 ;;
  esac
done
