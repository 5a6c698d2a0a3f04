"""The Preview step's preflight line (`gpuwizard doctor`): the environment the job will run in, asked off the UI
thread for each new command, so a broken decoder or a full /dev/shm is seen before ctrl+r."""

from __future__ import annotations

from textual import on, work
from textual.content import Content
from textual.widgets import Static

from gpuwizard.core.safetext import safe_text
from gpuwizard.model.job import BuildContext, LaunchSpec
from gpuwizard.model.trust import is_trusted
from gpuwizard.tui.base.messages import DoctorChecked

STYLES = {"ready": "$success", "warnings": "$warning", "blocked": "bold $error", "not checked": "$text-muted"}


class DoctorLine(Static):
    asked: str | None = None
    """The command the line is about (its argv, environment and folder)."""

    def ask(self, spec: LaunchSpec | None, ctx: BuildContext | None) -> None:
        if spec is None or ctx is None:
            self.asked = None
            self.update("")
            return
        key = repr((spec.argv, sorted(spec.env.items()), spec.unset, spec.workdir))
        if key == self.asked:
            return
        self.asked = key
        if not is_trusted(ctx.preset):  # the trainer-check line above says why and how
            self.update(Content.styled("doctor: not checked either, until you trust this preset", "$text-muted"))
            return
        self.update(Content.styled("doctor: looking at the environment the job will run in...", "$text-muted"))
        self.look(key, spec, ctx)

    @work(thread=True, exclusive=True, group="doctor", exit_on_error=False)
    def look(self, key: str, spec: LaunchSpec, ctx: BuildContext) -> None:
        from gpuwizard.gpus.inventory import read_inventory
        from gpuwizard.trainers.check.doctor import doctor
        from gpuwizard.trainers.registry import get_trainer

        try:
            query = get_trainer(ctx.preset.trainer).trainer_query(ctx, spec)
            self.post_message(DoctorChecked(key, doctor(ctx, spec, query, read_inventory(), ctx.python)))
        except Exception as exc:  # the line says so; the launch runs the doctor again and refuses there
            self.post_message(DoctorChecked(key, None, f"{type(exc).__name__}: {exc}"))

    @on(DoctorChecked)
    def _checked(self, message: DoctorChecked) -> None:
        if message.key != self.asked:
            return  # an older command's answer
        if message.report is None:
            self.update(Content.styled(safe_text(f"doctor failed: {message.error}"), "$warning"))
            return
        report = message.report
        lines = [f"doctor: {report.summary}"] + [f"{f.level}: {f.text}" for f in report.findings]
        self.update(Content.styled(safe_text("\n".join(lines)), STYLES.get(report.status, "")))
