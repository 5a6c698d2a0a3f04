"""Secrets known by the shape of their value as well as by their name: a Hub token, a tracker's key or a bearer header
under any variable name is kept out of the run folder and the preview, and a secret on a command line is shown
redacted. The shapes: Hugging Face's `hf_` user access tokens, Weights & Biases' 40-hex keys (and `wandb_v1_`, 86
characters, accepted from wandb 0.22.3: wandb/wandb#10688), GitHub's `ghp_`/`github_pat_`, `sk-` API keys, AWS key ids,
JSON web tokens (`eyJ`), `Bearer` credentials."""

from __future__ import annotations

import json

import pytest

from gpuwizard.core.secrets import REDACTED, redacted, redacted_argv, split_secrets
from gpuwizard.model.job import LaunchSpec

HF = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gH3j"  # 34 after the prefix, as the Hub issues them
WANDB_LEGACY = "0123456789abcdef0123456789abcdef01234567"
WANDB = "wandb_v1_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0_U1v2W3x4Y5z6A7b8C9d0E1f2G3h4I5j6K7l8M"
SHAPED = {
    "HF_AUTH_HEADER": f"Bearer {HF}",
    "MY_HUB": HF,
    "TRACKER": WANDB_LEGACY,
    "TRACKER_NEW": WANDB,
    "GH": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "OPENAI": "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0k1L2",
    "AWS_ID": "AKIAIOSFODNN7EXAMPLE",
    "NEPTUNE": "eyJhcGlfYWRkcmVzcyI6Imh0dHBzOi8vYXBwLm5lcHR1bmUuYWkifQ==",
    "AUTH": "bearer abcdefgh12345678",
}
PLAIN = {
    "NCCL_DEBUG": "INFO",
    "HF_HOME": "/data/hf",
    "OMP_NUM_THREADS": "4",
    "RUN_NAME": "hf_finetune_so100",
    "CHECKPOINT": "/mnt/ckpt/task-0001-disk-images",
    "NOTE": "a short hex 0123abcd and a word",
}


@pytest.mark.parametrize("name", list(SHAPED))
def test_a_token_shaped_value_is_a_secret_whatever_its_name(name):
    env = {name: SHAPED[name], **PLAIN}
    plain, secret = split_secrets(env)
    assert secret == {name: SHAPED[name]} and plain == PLAIN
    assert redacted(env) == {name: REDACTED, **PLAIN}


def test_a_launch_spec_shows_and_records_a_token_shaped_variable_redacted():
    spec = LaunchSpec(argv=["python", "train.py"], env={"HF_AUTH_HEADER": f"Bearer {HF}", "NCCL_DEBUG": "INFO"})
    assert spec.to_json()["env"] == {"HF_AUTH_HEADER": REDACTED, "NCCL_DEBUG": "INFO"}
    assert spec.full_env({})["HF_AUTH_HEADER"] == f"Bearer {HF}", "the job still gets it, by its environment"


def test_a_secret_on_the_command_line_is_shown_redacted_and_a_look_alike_is_not():
    argv = [
        "python",
        "train.py",
        f"--hub-token={HF}",
        "--x",
        HF,
        "--hub_token",
        "not-shaped-but-named",
        "--wandb.api_key=abc",
        f"--header=Authorization: Bearer {HF}",
        "--tokenizer",
        "t5-small",
        "--max_tokens=512",
        "--dataset.image_key",
        "observation.image",
        "--revision",
        WANDB_LEGACY,
        "--push_to_hub",
        "--token",
        "--next",
    ]
    assert redacted_argv(argv) == [
        "python",
        "train.py",
        f"--hub-token={REDACTED}",
        "--x",
        REDACTED,
        "--hub_token",
        REDACTED,
        f"--wandb.api_key={REDACTED}",
        f"--header=Authorization: {REDACTED}",
        "--tokenizer",
        "t5-small",
        "--max_tokens=512",
        "--dataset.image_key",
        "observation.image",
        "--revision",
        WANDB_LEGACY,
        "--push_to_hub",
        "--token",
        "--next",
    ]
    assert redacted_argv(argv[:2]) == argv[:2]


def test_the_preview_the_script_and_the_record_never_show_a_token_under_a_plain_name():
    """The shell preview and command.json show a token-shaped value neither in the environment nor on the command
    line; the script the job runs reads the variable from the environment and keeps the argument it needs."""
    spec = LaunchSpec(argv=["python", "train.py", f"--hub-token={HF}"], env={"HUB": HF, "NCCL_DEBUG": "INFO"})
    shown = spec.shell()
    assert HF not in shown and 'HUB="$HUB"' in shown and f"--hub-token={REDACTED}" in shown
    assert HF not in json.dumps(spec.to_json())
    script = spec.script()
    assert 'export HUB="${HUB:?' in script and f"--hub-token={HF}" in script
