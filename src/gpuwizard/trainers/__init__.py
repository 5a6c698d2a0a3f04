"""The trainers: one module or subpackage each behind the small `Trainer` interface (base.py), listed in
registry.py, with the check of a command by the trainer's own parser in check/."""
