#!/usr/bin/env bash
# GPU check: exercises the real NVML path and a real one-GPU NCCL run of the demo job, and prints
# what it saw. Run it on any machine with an NVIDIA GPU after `make test` set up .venv:
#   bash scripts/gpu_check.sh [OUT_DIR]
# OUT_DIR (default ./gpu-check-out) receives the NVML recording, the inventory JSON and the run folder.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-gpu-check-out}}"
mkdir -p "$out"
gw=".venv/bin/gpuwizard"
[ -x "$gw" ] || gw="gpuwizard"
export GPUWIZARD_DATA_DIR="$out/data" GPUWIZARD_CONFIG_DIR="$out/config"
status=0
step() { echo; echo "=== $*"; }

step "nvidia-smi"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>&1 || echo "(nvidia-smi not available)"

step "gpuwizard gpus (real NVML)"
"$gw" gpus || status=1
"$gw" gpus --json > "$out/inventory.json" || status=1
if ! grep -q '"uuid"' "$out/inventory.json"; then
  echo "no NVIDIA GPU visible here: the GPU check needs one (the rest of the project is tested without)"
  exit 3
fi
python3 - "$out/inventory.json" <<'PY' || status=1
import json, sys
inv = json.load(open(sys.argv[1]))
assert inv["gpus"], "NVML found no GPU"
for g in inv["gpus"]:
    missing = [k for k, v in g.items() if v is None]
    print(f"GPU{g['index']} {g['name']}: cc {g['compute_capability']}, {g['memory_total_mb']/1024:.1f} GB; fields the driver does not report: {missing or 'none'}")
print("links:", [(l["a"], l["b"], l["topology"], l["nvlinks"], l["p2p_read"]) for l in inv["links"]] or "single GPU")
PY

step "record this machine for replay (tests/data/nvml format)"
"$gw" gpus --record "$out/nvml-recording.json" || status=1
GPUWIZARD_NVML_REPLAY="$out/nvml-recording.json" "$gw" gpus | head -8

step "pytest: the real NVML code path"
.venv/bin/python -m pytest -q tests/unit/test_gpus.py -k real_nvml -p no:cacheprovider || status=1

step "one-GPU NCCL run of the demo job (headless), with GPU sampling"
"$gw" run demo-gpu --headless || status=1
run=$(ls -td "$GPUWIZARD_DATA_DIR"/runs/*/ 2>/dev/null | head -1)
[ -n "$run" ] || { echo "no run folder was created"; exit 1; }
python3 - "$run" <<'PY' || status=1
import json, sys, pathlib
run = pathlib.Path(sys.argv[1])
status = json.loads((run / "status.json").read_text())
progress = json.loads((run / "progress.json").read_text())
samples = [json.loads(l) for l in (run / "gpu.jsonl").read_text().splitlines()] if (run / "gpu.jsonl").exists() else []
print(f"state {status['state']}, exit {status['exit_code']}, step {progress['step']}/{progress['total']}, {progress['samples_per_s']} samples/s")
print(f"{len(samples)} GPU samples; peak util {max((s.get('utilization', 0) for s in samples), default=0)}%, "
      f"peak memory of this run {max((s.get('run_memory_mb', 0) for s in samples), default=0):.0f} MB, "
      f"peak power {max((s.get('power_w', 0) for s in samples), default=0):.0f} W")
log = (run / "log.txt").read_text()
print("backend:", "nccl" if "DDP nccl" in log else "?", "| banner:", next((l for l in log.splitlines() if "Effective batch" in l), "-"))
print("GPU memory held after the run:", status.get("gpu_memory_held_mb") or "none")
assert status["state"] == "finished" and samples, "the GPU run did not finish or was not sampled"
PY

step "NCCL Flight Recorder: armed in the run's environment, and torch's analyzer runs on its dump folder"
python3 - "$run" <<'PY' || status=1
import json, sys, pathlib
run = pathlib.Path(sys.argv[1])
env = json.loads((run / "job.json").read_text())["env"]
names = ["TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE"]
print({n: env.get(n) for n in names})
assert all(env.get(n) for n in names) and (run / "flight_recorder").is_dir(), "Flight Recorder not armed"
PY
.venv/bin/python -m torch.distributed.flight_recorder.fr_trace --help > /dev/null || status=1
# (a collective timeout with a missing rank needs two GPUs: NCCL refuses two ranks on one device)

step "stop a GPU run mid-training: no process and no GPU memory left behind"
.venv/bin/python scripts/stop_check.py demo-gpu || status=1

step "result"
[ $status -eq 0 ] && echo "GPU check passed" || echo "GPU check FAILED"
exit $status
