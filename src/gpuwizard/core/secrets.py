"""Secrets (tokens, keys, passwords), known by a variable's or a flag's name or by the shape of the value itself: in the
environment their values reach the job through its environment only; everywhere gpuwizard writes or shows them they
are redacted. A secret on the job's command line has to reach it there: it is shown redacted, and `ps` still shows it
to every user of the machine."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
SECRET_FLAG = re.compile(
    r"(?:^|[-_.])(?:token|api[-_]?key|access[-_]?key|secret|password|passwd|credentials?)(?:$|[-_.])", re.IGNORECASE
)
"""A command-line flag that names a secret (--hub-token, --wandb.api_key); a word inside another (--tokenizer,
--max_tokens, --image_key) is no secret's name."""
SECRET_SHAPE = re.compile(
    r"\bhf_[A-Za-z0-9]{30,}"  # a Hugging Face access token (hf_ and 34 letters and digits)
    r"|\bapi_org_[A-Za-z0-9]{30,}"  # a Hugging Face organisation token of old
    r"|\bwandb_v1_[A-Za-z0-9_]{40,}"  # a Weights & Biases API key (86 characters since wandb 0.22.3)
    r"|\blocal-[0-9a-f]{40}\b"  # a W&B local server's key
    r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}|\bgithub_pat_[A-Za-z0-9_]{40,}"  # GitHub tokens
    r"|\bsk-[A-Za-z0-9_-]{20,}"  # OpenAI- and Anthropic-style API keys
    r"|\bAKIA[0-9A-Z]{16}\b"  # an AWS access key id
    r"|\beyJ[A-Za-z0-9_-]{20,}={0,2}(?:\.[A-Za-z0-9_-]+){0,2}"  # a JSON web token, Neptune's API token
    r"|\b[Bb]earer\s+[A-Za-z0-9._~+/=-]{8,}"  # an Authorization header's bearer credential
)
LEGACY_KEY = re.compile(r"[0-9a-f]{40}")
"""A W&B API key of before 0.22.3: a whole value of 40 hex digits. In the environment only: on a command line it is
as likely a commit (--revision)."""
REDACTED = "<redacted>"


def secret_shaped(value: str) -> bool:
    """A value that looks like a token whatever it is called."""
    return bool(SECRET_SHAPE.search(value) or LEGACY_KEY.fullmatch(value.strip()))


def is_secret(name: str, value: str = "") -> bool:
    """An environment variable that holds a secret, by its name or, given its value, by that value's shape."""
    return bool(SECRET_NAME.search(name)) or secret_shaped(value)


def redacted(env: dict[str, str]) -> dict[str, str]:
    """The same variables with secret values replaced by a marker."""
    return {name: REDACTED if is_secret(name, value) else value for name, value in env.items()}


def split_secrets(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(plain variables, secret variables)."""
    secret = {name: value for name, value in env.items() if is_secret(name, value)}
    return {name: value for name, value in env.items() if name not in secret}, secret


def redacted_argv(argv: list[str]) -> list[str]:
    """The command as it may be shown and written: the value of a flag that names a secret (--hub-token=V,
    --hub-token V) and every token-shaped part of an argument replaced by the marker."""
    shown: list[str] = []
    follows_flag = False
    for arg in argv:
        flag, sep, value = arg.partition("=")
        if follows_flag and not arg.startswith("-"):
            shown.append(REDACTED)
        elif arg.startswith("-") and sep and SECRET_FLAG.search(flag.lstrip("-")):
            shown.append(f"{flag}={REDACTED}")
        else:
            shown.append(SECRET_SHAPE.sub(REDACTED, arg))
        follows_flag = arg.startswith("-") and not sep and bool(SECRET_FLAG.search(arg.lstrip("-")))
    return shown
