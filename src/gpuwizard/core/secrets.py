"""Secret-looking environment variables (tokens, keys, passwords): their values reach the job through its
environment only, and are redacted in everything gpuwizard writes or shows."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
REDACTED = "<redacted>"


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def redacted(env: dict[str, str]) -> dict[str, str]:
    """The same variables with secret values replaced by a marker."""
    return {name: REDACTED if is_secret(name) else value for name, value in env.items()}


def split_secrets(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(plain variables, secret variables)."""
    secret = {name: value for name, value in env.items() if is_secret(name)}
    return {name: value for name, value in env.items() if name not in secret}, secret
