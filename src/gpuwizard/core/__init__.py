"""The base layer: errors, exit codes, paths, safe text, secrets, YAML, strict models, network, units; imports only the
standard library, pydantic and yaml."""
