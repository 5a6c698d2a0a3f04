"""The Textual face of gpuwizard: the wizard, the live monitor, presets and themes."""
