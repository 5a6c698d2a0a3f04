"""The worked examples and hand-written presets, checked through `plan --json` and `preview --format json`."""

from __future__ import annotations

import json
import os
import stat

import pytest

from gpuwizard.model.preset_files import load_preset
from gpuwizard.model.sweep import expand, parse_sets
from support.cli import flag
from support.data import DATA

LEROBOT_MAIN_ACCUM = """\
version: 1
name: act-4x-accum
trainer: lerobot
policy: act
dataset: {repo_id: me/pick}
hardware: {gpus: 4}
batch: {size: 8, grad_accum: 2}
optim: {lr: 1.0e-5, steps: 20000}
scaling: {rule: none, reference_gpus: 4}
trainer_options: {api: main}
"""

GROOT_8 = """\
version: 1
name: groot-8
trainer: groot
policy: groot
dataset: {root: /data/so100}
hardware: {gpus: 8}
batch: {size: 64}
optim: {lr: 1.0e-4, steps: 10000}
trainer_options:
  base_model_path: nvidia/GR00T-N1.7-3B
  embodiment_tag: NEW_EMBODIMENT
  modality_config_path: examples/SO100/so100_config.py
"""


def plan_json(gw, path, *extra):
    result = gw("plan", path, "--json", *extra)
    return result, result.json()


def preview_json(gw, path, *extra):
    result = gw("preview", path, "--format", "json", *extra)
    assert result.code == 0, result.err
    return result.json()


def test_lerobot_batch_is_per_worker_8_x_4_x_accum_2_is_64(gw, write_preset):
    result, plan = plan_json(gw, write_preset(LEROBOT_MAIN_ACCUM))
    assert result.code == 0, result.err
    assert (plan["world_size"], plan["per_device_batch"], plan["effective_batch"]) == (4, 8, 64)
    table = {row["gpus"]: row["effective"] for row in plan["batch_table"]}
    assert table == {1: 16, 2: 32, 4: 64, 8: 128}
    argv = preview_json(gw, write_preset(LEROBOT_MAIN_ACCUM))["argv"]
    assert flag(argv, "--batch_size") == "8"
    assert flag(argv, "--accelerator.gradient_accumulation.steps") == "2"
    assert flag(argv, "--nproc-per-node") == "4"


def test_groot_global_64_on_8_gpus_is_8_per_card_and_64_per_update(gw, write_preset):
    result, plan = plan_json(gw, write_preset(GROOT_8))
    assert result.code == 0, result.err
    assert (plan["per_device_batch"], plan["effective_batch"], plan["scale_factor"]) == (8, 64, 1.0)
    argv = preview_json(gw, write_preset(GROOT_8))["argv"]
    assert flag(argv, "--global-batch-size") == "64"
    assert flag(argv, "--num-gpus") == flag(argv, "--nproc-per-node") == "8"


def test_groot_global_32_accum_8_on_4_gpus_is_256_per_update_8_per_card(gw, write_preset):
    text = GROOT_8.replace("gpus: 8", "gpus: 4").replace("batch: {size: 64}", "batch: {size: 32, grad_accum: 8}")
    result, plan = plan_json(gw, write_preset(text))
    assert result.code == 0, result.err
    assert (plan["per_device_batch"], plan["effective_batch"]) == (8, 256)
    argv = preview_json(gw, write_preset(text))["argv"]
    assert flag(argv, "--gradient-accumulation-steps") == "8"
    assert flag(argv, "--num-gpus") == "4"


def test_linear_rule_on_two_gpus_doubles_lr_and_reaches_the_trainer(gw, write_preset):
    text = (
        LEROBOT_MAIN_ACCUM.replace("policy: act", "policy: smolvla")
        .replace("hardware: {gpus: 4}", "hardware: {gpus: 2}")
        .replace("grad_accum: 2", "grad_accum: 1")
        .replace("rule: none, reference_gpus: 4", "rule: linear_lr, reference_gpus: 1")
        .replace("lr: 1.0e-5", "lr: 1.0e-4")
    )
    result, plan = plan_json(gw, write_preset(text))
    assert result.code == 0, result.err
    assert plan["scale_factor"] == 2 and plan["lr"] == pytest.approx(2e-4) and plan["steps"] == 20000
    argv = preview_json(gw, write_preset(text))["argv"]
    assert flag(argv, "--policy.optimizer_lr") == "0.0002"
    assert flag(argv, "--optimizer.lr") is None, "--optimizer.lr is silently overwritten by LeRobot's policy preset"
    # smolvla's cosine schedule is 1000 warmup / 30000 decay; a 20000-step run shrinks both (see the test below)
    assert (plan["warmup_steps"], plan["warmup_source"]) == (666, "trainer default")
    assert flag(argv, "--policy.scheduler_warmup_steps") is None


def test_a_cpu_plans_advice_names_memory_per_process_and_asks_for_no_gpu_memory(gw):
    result = gw("plan", "demo-cpu", "--json")
    assert result.code == 0, result.err
    advice = result.json()["advice"][0]
    assert "GB per process at this batch; CPU processes share the machine's memory" in advice
    assert "gpu_memory_gb" not in advice
    gpu = gw("plan", "demo-gpu", "--json").json()["advice"][0]
    assert "GB per device at this batch; device memory unknown: set hardware.gpu_memory_gb" in gpu


def test_divide_steps_halves_steps_on_two_gpus(gw, write_preset):
    text = (
        LEROBOT_MAIN_ACCUM.replace("hardware: {gpus: 4}", "hardware: {gpus: 2}")
        .replace("grad_accum: 2", "grad_accum: 1")
        .replace("rule: none, reference_gpus: 4", "rule: divide_steps, reference_gpus: 1")
    )
    result, plan = plan_json(gw, write_preset(text))
    assert result.code == 0
    assert (plan["steps"], plan["lr"]) == (10000, pytest.approx(1e-5))
    assert flag(preview_json(gw, write_preset(text))["argv"], "--steps") == "10000"


def test_sqrt_rule_and_none_rule_warning(gw, write_preset):
    text = LEROBOT_MAIN_ACCUM.replace("grad_accum: 2", "grad_accum: 1").replace(
        "reference_gpus: 4", "reference_gpus: 1"
    )
    _, plan = plan_json(gw, write_preset(text))
    assert plan["scale_factor"] == 4 and plan["lr"] == pytest.approx(1e-5)
    assert any("scaling.rule" in w and "4x" in w for w in plan["warnings"])
    _, plan = plan_json(gw, write_preset(text.replace("rule: none", "rule: sqrt_lr")))
    assert plan["lr"] == pytest.approx(2e-5)


def test_linear_rule_adds_a_warmup_where_the_policy_has_none(gw, write_preset):
    text = LEROBOT_MAIN_ACCUM.replace("grad_accum: 2", "grad_accum: 1").replace(
        "rule: none, reference_gpus: 4", "rule: linear_lr, reference_gpus: 1"
    )
    _, plan = plan_json(gw, write_preset(text))
    assert (
        plan["lr"] == pytest.approx(4e-5)
        and plan["warmup_steps"] == 1000
        and plan["warmup_source"] == "added for linear_lr"
    )
    argv = preview_json(gw, write_preset(text))["argv"]
    assert "--use_policy_training_preset=false" in argv
    assert flag(argv, "--optimizer.lr") == "4e-05" and flag(argv, "--scheduler.num_warmup_steps") == "1000"


def test_same_preset_on_another_gpu_count(gw, write_preset):
    path = write_preset(GROOT_8)
    _, plan = plan_json(gw, path, "--gpus", "4")
    assert (plan["world_size"], plan["per_device_batch"], plan["effective_batch"]) == (4, 16, 64)
    result, plan = plan_json(gw, path, "--gpus", "3")
    assert result.code == 2 and plan["effective_batch"] is None
    assert "batch.size = 64" in result.err and "divide evenly over 3" in result.err and "Fix:" in result.err


def test_groot_one_gpu_runs_plain_python_with_one_visible_device(gw, write_preset):
    spec = preview_json(gw, write_preset(GROOT_8), "--gpus", "1")
    assert "torchrun" not in " ".join(spec["argv"]) and "torch.distributed.run" not in spec["argv"]
    assert spec["argv"][1].endswith("launch_finetune.py")
    assert spec["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert flag(spec["argv"], "--num-gpus") == "1"


def test_openpi_jax_is_one_process_with_fsdp_devices_and_mem_fraction(gw):
    spec = preview_json(gw, "pi05-openpi-fsdp")
    assert spec["argv"][:4] == ["uv", "run", "python", "scripts/train.py"] and spec["argv"][4] == "pi05_libero"
    assert flag(spec["argv"], "--fsdp-devices") == "4" and flag(spec["argv"], "--batch-size") == "32"
    assert spec["env"]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.9"
    assert spec["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_openpi_pytorch_runs_under_torchrun(gw, write_preset):
    text = """\
version: 1
name: pi0-torch
trainer: openpi
policy: pi0
dataset: {repo_id: libero}
hardware: {gpus: 2}
batch: {size: 32}
optim: {steps: 3000}
trainer_options: {config_name: pi0_libero, backend: pytorch, uv: false}
"""
    spec = preview_json(gw, write_preset(text))
    assert "torch.distributed.run" in spec["argv"] or spec["argv"][0].endswith("torchrun")
    assert "scripts/train_pytorch.py" in spec["argv"] and flag(spec["argv"], "--nproc-per-node") == "2"


HF_JOB = """\
version: 1
name: hf-job
trainer: hf
policy: smolvla
dataset: {repo_id: me/data}
hardware: {gpus: 2}
batch: {size: 4, grad_accum: 4}
optim: {lr: 2.0e-5, steps: 500, warmup_ratio: 0.1}
mixed_precision: bf16
trainer_options: {script: train.py}
"""


def test_hf_trainer_flags(gw, write_preset):
    spec = preview_json(gw, write_preset(HF_JOB))
    argv = spec["argv"]
    assert flag(argv, "--per_device_train_batch_size") == "4" and flag(argv, "--gradient_accumulation_steps") == "4"
    assert (
        flag(argv, "--learning_rate") == "2e-05"
        and flag(argv, "--max_steps") == "500"
        and flag(argv, "--warmup_steps") == "50"
    )
    assert "--bf16" in argv


def test_the_hf_trainer_takes_any_policy_and_shards_through_fsdp_config(gw, write_preset):
    """An HF Trainer script trains whatever it builds; the catalog policy only sizes memory, so every policy is
    allowed. transformers 5.24 (src/transformers/training_args.py) takes a bare --fsdp (the string form is deprecated)
    and the wrap policy inside --fsdp_config (a JSON string on the command line); min_num_params is read only with
    auto_wrap_policy SIZE_BASED_WRAP (tests/test_hf.py asks the real parser)."""
    text = """\
version: 1
name: hf-any
trainer: hf
policy: act
dataset: {repo_id: me/data}
hardware: {gpus: 2}
batch: {size: 4}
optim: {lr: 2.0e-5, steps: 500}
strategy: fsdp
fsdp: {wrap_modules: [ACTEncoderLayer, ACTDecoderLayer]}
trainer_options: {script: train.py}
"""
    result, plan = plan_json(gw, write_preset(text))
    assert result.code == 0 and plan["errors"] == [], result.err
    argv = preview_json(gw, write_preset(text))["argv"]
    assert argv[argv.index("--fsdp") + 1] == "--fsdp_config"
    assert json.loads(flag(argv, "--fsdp_config")) == {
        "transformer_layer_cls_to_wrap": ["ACTEncoderLayer", "ACTDecoderLayer"]
    }
    assert not any(a.startswith(("--fsdp_transformer_layer_cls_to_wrap", "--fsdp_min_num_params")) for a in argv)
    by_size = text.replace("wrap_modules: [ACTEncoderLayer, ACTDecoderLayer]", "min_num_params: 100000")
    argv = preview_json(gw, write_preset(by_size))["argv"]
    assert json.loads(flag(argv, "--fsdp_config")) == {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 100000}


def test_single_node_runs_a_private_rendezvous_multi_node_uses_endpoint(gw, write_preset):
    """One node: the loopback rendezvous and no port picked in advance (a pre-probed port could be taken by another
    process, which then becomes the job's store); several nodes: node 0's endpoint, with a note to firewall it."""
    spec = preview_json(gw, write_preset(LEROBOT_MAIN_ACCUM))
    assert flag(spec["argv"], "--rdzv-backend") == "gpuwizard-loopback"
    assert flag(spec["argv"], "--rdzv-endpoint") == "127.0.0.1"
    assert not any(a.startswith(("--master", "--standalone")) for a in spec["argv"])
    multi = LEROBOT_MAIN_ACCUM.replace(
        "hardware: {gpus: 4}", "hardware: {gpus: 4, nodes: 2, node_rank: 1, rdzv_endpoint: 10.0.0.5:29500}"
    )
    argv = preview_json(gw, write_preset(multi))["argv"]
    assert (
        flag(argv, "--nnodes"),
        flag(argv, "--node-rank"),
        flag(argv, "--rdzv-endpoint"),
        flag(argv, "--rdzv-backend"),
    ) == ("2", "1", "10.0.0.5:29500", "c10d")
    assert "--standalone" not in argv
    _, plan = plan_json(gw, write_preset(multi))
    assert plan["world_size"] == 8 and plan["effective_batch"] == 128
    assert any("firewall that port" in n and "10.0.0.5:29500" in n for n in plan["notes"])


def test_lerobot_always_sets_output_dir_and_push_to_hub_false(gw, write_preset):
    argv = preview_json(gw, write_preset(LEROBOT_MAIN_ACCUM))["argv"]
    assert flag(argv, "--output_dir") == "outputs/train/act-4x-accum/<run-id>", "each run its own, named at launch"
    assert "--policy.push_to_hub=false" in argv
    pushed = preview_json(gw, write_preset(LEROBOT_MAIN_ACCUM.replace("{api: main}", "{api: main, repo_id: me/act}")))[
        "argv"
    ]
    assert "--policy.repo_id=me/act" in pushed and "--policy.push_to_hub=false" not in pushed


def test_accelerate_variables_removed_with_a_warning(gw, write_preset, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
    spec = preview_json(gw, write_preset(LEROBOT_MAIN_ACCUM))
    assert {"ACCELERATE_USE_FSDP", "ACCELERATE_MIXED_PRECISION"} <= set(spec["unset"])
    assert any("ACCELERATE_USE_FSDP" in w for w in spec["warnings"])
    assert spec["shell"].split(" && ", 1)[1].startswith("env -u ") and "-u ACCELERATE_USE_FSDP" in spec["shell"]


# --- validation: one paragraph, exit 2, the field, the value, the fix ---------------------------------


def plan_error(gw, path):
    result = gw("plan", path)
    assert result.code == 2
    assert "Traceback" not in result.err and "Fix:" in result.err
    return result.err


def test_fsdp_without_wrap_units_is_refused(gw, write_preset):
    text = LEROBOT_MAIN_ACCUM.replace("policy: act", "policy: smolvla") + "strategy: fsdp\n"
    assert "fsdp.wrap_modules" in plan_error(gw, write_preset(text))
    ok = text + "fsdp: {wrap_modules: [SmolVLMDecoderLayer]}\n"
    argv = preview_json(gw, write_preset(ok))["argv"]
    assert (
        flag(argv, "--parallelism.dp_shard") == "4"
        and flag(argv, "--accelerator.fsdp.wrap_modules") == '["SmolVLMDecoderLayer"]'
    )
    assert "--env_eval_freq=0" in argv


def test_fp16_with_fsdp_on_lerobot_is_refused(gw, write_preset):
    err = plan_error(gw, write_preset(LEROBOT_MAIN_ACCUM + "strategy: fsdp\nmixed_precision: fp16\n"))
    assert "mixed_precision = 'fp16'" in err


def test_grad_accum_on_lerobot_061_is_refused(gw, write_preset):
    err = plan_error(gw, write_preset(LEROBOT_MAIN_ACCUM.replace("api: main", "api: v0.6")))
    assert "batch.grad_accum = 2" in err and "0.6.1" in err


def test_fsdp_on_pi05_lerobot_is_refused(gw, write_preset):
    text = (
        LEROBOT_MAIN_ACCUM.replace("policy: act", "policy: pi05")
        + "strategy: fsdp\nfsdp: {min_num_params: 100000000}\n"
    )
    assert "cannot be sharded" in plan_error(gw, write_preset(text))


def test_missing_required_trainer_options(gw, write_preset):
    text = GROOT_8.replace("  embodiment_tag: NEW_EMBODIMENT\n", "").replace(
        "  base_model_path: nvidia/GR00T-N1.7-3B\n", ""
    )
    err = plan_error(gw, write_preset(text))
    assert "trainer_options.base_model_path" in err and "trainer_options.embodiment_tag" in err
    err = plan_error(gw, write_preset(GROOT_8.replace("  modality_config_path: examples/SO100/so100_config.py\n", "")))
    assert "trainer_options.modality_config_path" in err


def test_process_count_must_match_the_trainers_gpu_count(gw, write_preset):
    err = plan_error(gw, write_preset(GROOT_8 + "launch:\n  extra_args: ['--num-gpus', '4']\n"))
    assert "launch.extra_args" in err and "--num-gpus" in err and "8 processes" in err


def test_dataset_root_without_metadata(gw, write_preset, tmp_path):
    (tmp_path / "empty").mkdir()
    err = plan_error(
        gw,
        write_preset(
            LEROBOT_MAIN_ACCUM.replace("{repo_id: me/pick}", f"{{repo_id: me/pick, root: {tmp_path / 'empty'}}}")
        ),
    )
    assert "dataset.root" in err and "meta/info.json" in err


def test_dataset_root_metadata_is_read(gw, write_preset):

    root = DATA / "datasets" / "so100_tiny_lerobot061"
    _, plan = plan_json(
        gw, write_preset(LEROBOT_MAIN_ACCUM.replace("{repo_id: me/pick}", f"{{repo_id: local/tiny, root: {root}}}"))
    )
    assert (plan["dataset"]["episodes"], plan["dataset"]["frames"], plan["dataset"]["fps"]) == (4, 160, 30)
    assert plan["dataset"]["cameras"] == ["observation.images.front"]
    assert any("effective batch (64)" in w and "160 frames" in w for w in plan["warnings"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_output_dir_that_cannot_be_written_nonroot(gw, write_preset, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    err = plan_error(gw, write_preset(LEROBOT_MAIN_ACCUM + f"output_dir: {locked}/out\n"))
    assert "output_dir" in err


def test_output_dir_that_is_a_file(gw, write_preset, tmp_path):
    (tmp_path / "taken").write_text("x")
    err = plan_error(gw, write_preset(LEROBOT_MAIN_ACCUM + f"output_dir: {tmp_path / 'taken'}\n"))
    assert "output_dir" in err and "not a folder" in err


def test_launch_python_that_is_not_executable(gw, write_preset, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("not a program")
    err = plan_error(gw, write_preset(LEROBOT_MAIN_ACCUM + f"launch:\n  python: {fake}\n"))
    assert "launch.python" in err and "not an executable" in err
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert gw("plan", write_preset(LEROBOT_MAIN_ACCUM + f"launch:\n  python: {fake}\n")).code == 0


def test_cpu_device_refused_for_groot(gw, write_preset):
    err = plan_error(gw, write_preset(GROOT_8.replace("hardware: {gpus: 8}", "hardware: {gpus: 8, device: cpu}")))
    assert "hardware.device = 'cpu'" in err


def test_bad_flag_is_exit_2_without_traceback(gw):
    result = gw("plan", "demo-cpu", "--gpus", "zero")
    assert result.code == 2 and "Traceback" not in result.err and "--gpus" in result.err


@pytest.mark.parametrize(
    "name",
    [
        "demo-cpu",
        "so100-act-1gpu",
        "so100-act-ddp2",
        "smolvla-ddp4",
        "groot-n17-8gpu",
        "groot-n17-accum",
        "pi05-openpi-fsdp",
    ],
)
def test_shipped_presets_plan_and_preview_cleanly(gw, name):
    result, plan = plan_json(gw, name)
    assert result.code == 0 and plan["errors"] == [], result.err
    for key in (
        "trainer",
        "policy",
        "world_size",
        "per_device_batch",
        "effective_batch",
        "reference_effective_batch",
        "scale_factor",
        "lr",
        "steps",
        "warmup_steps",
        "strategy",
        "fits",
        "warnings",
        "errors",
    ):
        assert key in plan
    assert preview_json(gw, name)["argv"]
    assert gw("plan", name).code == 0


def test_fit_advice_is_honest_about_a_second_gpu(gw, write_preset):
    text = LEROBOT_MAIN_ACCUM.replace("hardware: {gpus: 4}", "hardware: {gpus: 2, gpu_memory_gb: 24}")
    _, plan = plan_json(gw, write_preset(text))
    assert plan["fits"]["fits"] is True and plan["fits"]["device_gb"] == 24
    assert any("will not pay" in a for a in plan["advice"])
    assert any(
        "(1) the model does not fit" in a and "(2) the same fine-tune runs many times" in a and "(3)" in a
        for a in plan["advice"]
    )
    (hint,) = [a.split("`")[1] for a in plan["advice"] if "gpuwizard sweep" in a]
    assert hint.endswith("--set hardware.gpus=1 --seeds 2"), "two one-GPU runs, where the 2-GPU run would go"
    args = hint.split()[2:]
    args[0] = write_preset(text)  # the hint names the preset by name; this one is a file
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    runs = expand(load_preset(str(args[0])), parse_sets(sets), int(args[args.index("--seeds") + 1]))
    assert [(r.preset.hardware.gpus, r.preset.options.seed) for r in runs] == [(1, 0), (1, 1)], "the hint is a grid"
    big = LEROBOT_MAIN_ACCUM.replace("policy: act", "policy: pi05").replace(
        "hardware: {gpus: 4}", "hardware: {gpus: 2, gpu_memory_gb: 24}"
    )
    _, plan = plan_json(gw, write_preset(big))
    assert plan["fits"]["fits"] is False and any("does not fit one device" in a for a in plan["advice"])


@pytest.mark.parametrize("precision, expected", [("no", None), ("bf16", "bf16"), ("fp16", "fp16")])
def test_lerobot_main_leaves_mixed_precision_no_to_its_default(gw, write_preset, precision, expected):
    """LeRobot main at 7427f31 (lerobot/configs/accelerator.py): AcceleratorConfig.mixed_precision defaults to "no",
    and __post_init__ refuses anything but "no", "fp16", "bf16"; draccus reads a command-line `no` as YAML false, so
    `--accelerator.mixed_precision=no` stops lerobot-train at start-up (shared/vendor/README.md, checked there)."""
    preset = LEROBOT_MAIN_ACCUM.replace(
        "trainer_options: {api: main}", f'trainer_options: {{api: main}}\nmixed_precision: "{precision}"'
    )
    argv = preview_json(gw, write_preset(preset))["argv"]
    flags = [a for a in argv if a.startswith("--accelerator.mixed_precision")]
    assert flags == ([f"--accelerator.mixed_precision={expected}"] if expected else [])


def test_accelerate_variables_are_removed_and_the_warning_names_what_lerobot_main_refuses(
    gw, write_preset, monkeypatch
):
    """lerobot/distributed/factory.py at 7427f31 (guard_against_env_interference) refuses exactly ACCELERATE_USE_FSDP,
    ACCELERATE_USE_PARALLELISM_CONFIG and ACCELERATE_GRADIENT_ACCUMULATION_STEPS, bypassed by
    LEROBOT_ALLOW_ACCELERATE_ENV=1; gpuwizard removes every accelerate-configuring variable and names those."""
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
    spec = preview_json(gw, write_preset(LEROBOT_MAIN_ACCUM))
    assert "ACCELERATE_MIXED_PRECISION" in spec["unset"]
    warning = next(w for w in spec["warnings"] if "accelerate-configuring" in w)
    assert "ACCELERATE_MIXED_PRECISION will be removed" in warning
    assert (
        "refuses only ACCELERATE_USE_FSDP, ACCELERATE_USE_PARALLELISM_CONFIG, ACCELERATE_GRADIENT_ACCUMULATION_STEPS, "
        "unless LEROBOT_ALLOW_ACCELERATE_ENV=1" in warning
    )


@pytest.mark.parametrize(
    "accum, steps, warmup",
    [(1, 5000, 166), (1, 20000, 666), (1, 30000, 1000), (1, 60000, 1000), (2, 5000, 167), (2, 20000, 500)],
)
def test_cosine_warmup_is_shrunk_with_a_short_run_as_lerobot_does(gw, write_preset, accum, steps, warmup):
    """lerobot/optim/schedulers.py, CosineDecayWithWarmupSchedulerConfig.build (0.6.1 and main at 7427f31): in a run
    shorter than num_decay_steps the warmup is int(num_warmup_steps * steps / num_decay_steps). gpuwizard shows that
    number and passes no scheduler flag, so lerobot-train computes the same one itself. On main the schedule counts
    loop steps (micro-batches; lerobot_train.py steps the scheduler in every loop step, and accelerate is built with
    step_scheduler_with_optimizer=False in configs/accelerator.py): with accumulation 2, 5,000 updates are 10,000
    loop steps, a warmup of int(1000 x 10000/30000) = 333 loop steps, 167 updates."""
    text = (
        LEROBOT_MAIN_ACCUM.replace("policy: act", "policy: smolvla")
        .replace("steps: 20000", f"steps: {steps}")
        .replace("grad_accum: 2", f"grad_accum: {accum}")
    )
    _, plan = plan_json(gw, write_preset(text))
    assert (plan["warmup_steps"], plan["warmup_source"]) == (warmup, "trainer default")
    assert (plan["steps"], plan["trainer_steps"]) == (steps, steps * accum)
    argv = preview_json(gw, write_preset(text))["argv"]
    assert not any(a.startswith("--policy.scheduler_") for a in argv)
    assert flag(argv, "--steps") == str(steps * accum)
    explicit = text.replace(f"steps: {steps}}}", f"steps: {steps}, warmup_ratio: 0.1}}")
    _, plan = plan_json(gw, write_preset(explicit))
    argv = preview_json(gw, write_preset(explicit))["argv"]
    assert plan["warmup_steps"] == steps // 10
    assert flag(argv, "--policy.scheduler_warmup_steps") == str(steps // 10 * accum)
    assert flag(argv, "--policy.scheduler_decay_steps") == (str(steps * accum) if steps * accum < 30000 else None), (
        "our warmup is not rescaled"
    )


def test_lerobot_main_steps_count_micro_batches(gw, write_preset):
    """lerobot/scripts/lerobot_train.py at 7427f31: `step = 0  # number of loop steps (= micro-batches consumed per
    data-parallel worker)`, and --log_freq/--save_freq are compared with that step (shared/vendor/README.md: batch 2,
    2 processes, accumulation 2 and --steps=16 end at `step:16 smpl:64`). `steps` stay optimizer updates; the flags
    get steps x grad_accum; 0.6.1 has no accumulation, so its steps are the same number."""
    text = LEROBOT_MAIN_ACCUM.replace(
        "trainer_options: {api: main}", "trainer_options: {api: main, save_freq: 500, log_freq: 50}"
    )
    _, plan = plan_json(gw, write_preset(text))
    assert (plan["steps"], plan["trainer_steps"], plan["samples_seen"]) == (20000, 40000, 20000 * 8 * 4 * 2)
    argv = preview_json(gw, write_preset(text))["argv"]
    assert (flag(argv, "--steps"), flag(argv, "--save_freq"), flag(argv, "--log_freq")) == ("40000", "1000", "100")
    result = gw("plan", write_preset(text))
    assert "20000 optimizer updates, 1280000 samples seen" in result.out
    assert "it is given 40000 steps, and its log and checkpoint steps" in " ".join(result.out.split())
    release = text.replace("api: main", "api: v0.6").replace("grad_accum: 2", "grad_accum: 1")
    _, plan = plan_json(gw, write_preset(release))
    assert plan["trainer_steps"] == plan["steps"] == 20000
    assert "trainer counts" not in gw("plan", write_preset(release)).out


def test_the_shipped_smolvla_preset_warms_up_as_lerobot_train_alone_would(gw):
    result, plan = plan_json(gw, "smolvla-ddp4")
    assert plan["steps"] == 5000 and plan["warmup_steps"] == int(1000 * 5000 / 30000) == 166


def test_pi0_fast_on_openpi_pytorch_is_refused(gw, write_preset):
    """Physical-Intelligence/openpi README at 02e1010, "PyTorch Support": the PyTorch implementation does not support
    the pi0-FAST model (train_pytorch.py would train a pi0 in its place). One paragraph, exit 2; JAX is fine."""
    text = """\
version: 1
name: fast-torch
trainer: openpi
policy: pi0_fast
dataset: {repo_id: physical-intelligence/libero}
hardware: {gpus: 2}
batch: {size: 32}
optim: {steps: 1000}
trainer_options: {config_name: pi0_fast_libero, backend: pytorch}
"""
    result = gw("plan", write_preset(text))
    assert (
        result.code == 2
        and "trainer_options.backend = 'pytorch': openpi's PyTorch trainer does not support pi0_fast" in result.err
    )
    jax = gw("plan", write_preset(text.replace("backend: pytorch", "backend: jax")))
    assert "does not support pi0_fast" not in jax.err


def test_act_backbone_lr_scales_with_the_lr(gw, write_preset):
    """lerobot/policies/act/modeling_act.py (0.6.1 and main at 7427f31): ACTPolicy.get_optim_params puts model.backbone
    in its own group at config.optimizer_lr_backbone (1e-5 in configuration_act.py); lerobot/optim/factory.py trains
    policy.parameters() (one group) when --use_policy_training_preset=false."""
    base = LEROBOT_MAIN_ACCUM.replace("grad_accum: 2", "grad_accum: 1").replace(
        "scaling: {rule: none, reference_gpus: 4}", "scaling: {rule: sqrt_lr, reference_gpus: 1}"
    )
    argv = preview_json(gw, write_preset(base))["argv"]
    assert flag(argv, "--policy.optimizer_lr") == "2e-05" and flag(argv, "--policy.optimizer_lr_backbone") == "2e-05"
    assert "--use_policy_training_preset=false" not in argv
    unscaled = preview_json(
        gw, write_preset(base.replace("rule: sqrt_lr, reference_gpus: 1", "rule: none, reference_gpus: 4"))
    )
    assert flag(unscaled["argv"], "--policy.optimizer_lr_backbone") == "1e-05", (
        "the backbone's own default (configuration_act.py: optimizer_lr_backbone 1e-5), passed so it cannot drift"
    )
    linear = base.replace("rule: sqrt_lr", "rule: linear_lr")
    spec = preview_json(gw, write_preset(linear))
    assert "--use_policy_training_preset=false" in spec["argv"] and flag(spec["argv"], "--optimizer.lr") == "4e-05"
    _, plan = plan_json(gw, write_preset(linear))
    assert any(
        "one group at lr 4e-05: the policy's own group lrs (optimizer_lr_backbone 4e-05 after scaling) are not applied"
        in n
        for n in plan["notes"]
    ), plan["notes"]


@pytest.mark.parametrize("api", ["v0.6", "main"])
def test_groot_through_lerobot_maps_mixed_precision_to_its_own_bf16_autocast(gw, write_preset, api):
    """lerobot/policies/groot/configuration_groot.py (0.6.1 and main at 7427f31): GrootConfig.use_bf16 (default true)
    drives torch.autocast(dtype=torch.bfloat16) in modeling_groot.py; --policy.use_amp would add fp16 autocast and a
    GradScaler on top (lerobot/configs/policies.py)."""
    text = f"""\
version: 1
name: groot-lerobot
trainer: lerobot
policy: groot
dataset: {{repo_id: me/pick}}
hardware: {{gpus: 2}}
batch: {{size: 8}}
optim: {{steps: 1000}}
mixed_precision: MP
trainer_options: {{api: {api}}}
"""
    for mp, expected in (("bf16", "true"), ('"no"', "false")):
        argv = preview_json(gw, write_preset(text.replace("MP", mp)))["argv"]
        assert flag(argv, "--policy.use_bf16") == expected
        assert not any(a.startswith(("--policy.use_amp", "--accelerator.mixed_precision")) for a in argv), argv
    result = gw("plan", write_preset(text.replace("MP", "fp16")))
    assert result.code == 2 and "mixed_precision = 'fp16': groot in LeRobot autocasts only to bf16" in result.err


OPENPI_DROID = """\
version: 1
name: droid-ft
trainer: openpi
policy: pi05
dataset: {repo_id: me/droid}
hardware: {gpus: 2}
batch: {size: 32}
optim: {steps: 20000}
scaling: {rule: none, reference_gpus: 2}
trainer_options: {config_name: pi05_droid_finetune}
"""


def test_openpi_passes_only_the_schedule_that_differs_from_its_config(gw, write_preset):
    """Physical-Intelligence/openpi at 15a9616, src/openpi/training/config.py: pi05_droid_finetune keeps
    CosineDecaySchedule's defaults (optimizer.py: peak 2.5e-5, warmup 1,000, decay 30,000) with 20,000 steps and
    batch 32; pi05_libero sets batch 256, peak 5e-5, warmup 10,000, decay 1,000,000. The lr belongs to the config."""
    _, plan = plan_json(gw, write_preset(OPENPI_DROID))
    assert (plan["lr"], plan["warmup_steps"]) == (2.5e-5, 1000)
    argv = preview_json(gw, write_preset(OPENPI_DROID))["argv"]
    assert not any(a.startswith("--lr-schedule") for a in argv), argv
    longer = preview_json(gw, write_preset(OPENPI_DROID.replace("steps: 20000", "steps: 40000")))["argv"]
    assert [a for a in longer if a.startswith("--lr-schedule")] == [], (
        "openpi keeps the config's own decay_steps whatever --num-train-steps says (optimizer.py:24-31)"
    )
    own_lr = OPENPI_DROID.replace("optim: {steps: 20000}", "optim: {lr: 1.0e-5, steps: 20000}")
    assert [a for a in preview_json(gw, write_preset(own_lr))["argv"] if a.startswith("--lr-schedule")] == [
        "--lr-schedule.peak-lr=1e-05",
        "--lr-schedule.decay-lr=1e-06",
    ], "the end lr keeps its tenth of the peak (tests/test_openpi.py: it must never sit above the peak)"
    libero = OPENPI_DROID.replace("pi05_droid_finetune", "pi05_libero")
    _, plan = plan_json(gw, write_preset(libero))
    assert (plan["lr"], plan["warmup_steps"]) == (5e-5, 10000)
    assert any("tuned for a global batch of 256; this run trains at 32" in n for n in plan["notes"])
    unknown = OPENPI_DROID.replace("pi05_droid_finetune", "my_robot_config")
    _, plan = plan_json(gw, write_preset(unknown))
    assert any("my_robot_config is not in gpuwizard's catalog" in w for w in plan["warnings"])


def test_each_trainer_resumes_in_its_own_form(gw, write_preset, tmp_path):
    """The resume forms, from each trainer's source: LeRobot (lerobot/configs/train.py, 0.6.1 and main at 7427f31:
    --resume=true needs --config_path=<out>/checkpoints/last/pretrained_model/train_config.json, no --policy.type);
    GR00T (Isaac-GR00T 626af89 gr00t/experiment/experiment.py: trainer.train(resume_from_checkpoint=True) always,
    and no --resume-from-checkpoint: the same command; tests/test_groot.py asks its real parser);
    openpi (scripts/train.py at 15a9616: --resume, checkpoints in <base>/<config>/<exp>/<step>); HF Trainer
    (TrainingArguments.resume_from_checkpoint: a checkpoint-<step> folder)."""
    out = tmp_path / "out"
    lerobot = LEROBOT_MAIN_ACCUM + f"output_dir: {out}\n"
    assert gw("preview", write_preset(lerobot), "--resume").err.count("no lerobot checkpoint") == 1
    config = out / "checkpoints" / "last" / "pretrained_model" / "train_config.json"
    config.parent.mkdir(parents=True)
    config.write_text("{}")
    argv = preview_json(gw, write_preset(lerobot), "--resume")["argv"]
    tail = argv[argv.index(next(a for a in argv if a.endswith("lerobot-train"))) + 1 :]
    assert tail == [f"--config_path={config}", "--resume=true"]
    assert not any(a.startswith(("--policy.type", "--policy.path")) for a in argv)
    fresh = gw("preview", write_preset(lerobot))
    assert fresh.code == 2 and "already exists; lerobot-train refuses to start in an existing output dir" in fresh.err
    (tmp_path / "empty").mkdir()  # lerobot/configs/train.py:259 (0.6.1): any existing folder, empty or not
    fresh = gw("preview", write_preset(LEROBOT_MAIN_ACCUM + f"output_dir: {tmp_path / 'empty'}\n"))
    assert fresh.code == 2 and fresh.err.count("Fix: continue it with `gpuwizard run act-4x-accum --resume`") == 1

    groot = GROOT_8 + f"output_dir: {out}\n"
    fresh_argv = preview_json(gw, write_preset(groot))["argv"]
    (out / "checkpoint-500").mkdir()
    resumed = preview_json(gw, write_preset(groot), "--resume")["argv"]
    assert resumed == fresh_argv and "--resume-from-checkpoint" not in resumed

    hf = HF_JOB + f"output_dir: {out}\n"
    (out / "checkpoint-1500").mkdir()
    argv = preview_json(gw, write_preset(hf), "--resume")["argv"]
    assert flag(argv, "--resume_from_checkpoint") == str(out / "checkpoint-1500"), "the newest step, not by name"

    openpi = OPENPI_DROID + f"output_dir: {out}\n"
    (out / "pi05_droid_finetune" / "droid-ft" / "5000").mkdir(parents=True)
    argv = preview_json(gw, write_preset(openpi), "--resume")["argv"]
    assert "--resume" in argv and "--overwrite" not in argv
    both = openpi.replace("config_name: pi05_droid_finetune}", "config_name: pi05_droid_finetune, overwrite: true}")
    result = gw("preview", write_preset(both), "--resume")
    assert result.code == 2 and "openpi refuses --overwrite together with --resume" in result.err
