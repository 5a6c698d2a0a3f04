"""How the wizard turns one field edit into a new preset: the GPU choice, a policy's trainer, and the trainer
options that a change of trainer sets aside (and gives back when that trainer is chosen again).

Textual-free; the core (preset records, catalog) is imported on the first edit, never on the way to the first
frame."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from gpuwizard.model.preset import Preset


@dataclass
class Toast:
    """What the wizard tells the user about an edit."""

    text: str
    severity: SeverityLevel = "information"


@dataclass
class PresetEditor:
    """The wizard's edits of its preset, remembering the options each trainer had when it was left."""

    options_by_trainer: dict[str, dict[str, Any]] = field(default_factory=dict)
    """trainer_options set aside when the trainer changed, by trainer."""

    def apply(self, old: Preset, path: str, value: Any) -> tuple[Preset, Toast | None]:
        """The preset with one field changed, and what to tell about it; UserError if the value is refused."""
        from gpuwizard.model.catalog import load_catalog
        from gpuwizard.model.preset import with_field
        from gpuwizard.planning.plan import trainers_for

        if path == "hardware":  # the GPU list: a count and the chosen devices together
            new = with_field(with_field(old, "hardware.devices", None), "hardware.gpus", value["gpus"])
            return with_field(new, "hardware.devices", value["devices"]), None
        if path == "hardware.gpus":
            return with_field(with_field(old, "hardware.devices", None), "hardware.gpus", value), None
        if path == "policy" and value != old.policy:
            # follow the new policy's preferred trainer unless the user picked a non-default one
            new = with_field(old, "policy", value)
            trainers = trainers_for(load_catalog()[value])
            user_choice = old.trainer != load_catalog()[old.policy].trainers[0]
            if old.trainer not in trainers or (not user_choice and old.trainer != trainers[0]):
                return self.with_trainer(new, trainers[0], undo=f"policy {old.policy}")
            return new, None
        if path == "trainer" and value != old.trainer:
            return self.with_trainer(old, value, undo=f"trainer {old.trainer}")
        return with_field(old, path, value), None

    def with_trainer(self, preset: Preset, trainer: str, undo: str) -> tuple[Preset, Toast]:
        """Another trainer takes other options: the old trainer's are set aside (the toast says which), and the new
        one's come back if they were set aside earlier, so choosing `undo` again undoes the change."""
        from gpuwizard.core.errors import UserError
        from gpuwizard.model.preset import with_field

        if preset.trainer_options:
            self.options_by_trainer[preset.trainer] = preset.trainer_options
        kept = self.options_by_trainer.pop(trainer, {})
        new = with_field(with_field(preset, "trainer_options", {}), "trainer", trainer)
        try:
            new = with_field(new, "trainer_options", kept)
        except UserError:
            kept = {}
        words = [f"Trainer {preset.trainer} -> {trainer}."]
        if preset.trainer_options:
            words.append(
                f"The {preset.trainer} options ({options_words(preset.trainer_options)}) are set aside: choose "
                f"{undo} again to get them back."
            )
        if kept:
            words.append(f"The {trainer} options you had set are back ({options_words(kept)}).")
        return new, Toast(" ".join(words), "warning" if preset.trainer_options else "information")


def options_words(options: dict[str, Any]) -> str:
    """trainer_options as `name: value` words for a toast."""
    return ", ".join(f"{name}: {value}" for name, value in options.items())
