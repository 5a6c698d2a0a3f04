"""Data users extend (catalog, themes) is read from files; bad files are reported, not crashed on."""

from __future__ import annotations

from gpuwizard.core import paths
from gpuwizard.model.catalog import load_catalog
from gpuwizard.tui.base.themes import load_themes


def test_every_catalog_figure_cites_a_source():
    for key, entry in load_catalog().items():
        assert entry.trainers, key
        assert "params_m" in entry.sources or key == "demo" and entry.sources, (
            f"{key} cites no source for its parameter count"
        )
        assert entry.vram.full_gb > 0 and entry.vram.at_batch > 0


def test_user_catalog_overrides_and_adds(gw):
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    (paths.config_dir() / "policies.yaml").write_text(
        "act:\n  default_lr: {lerobot: 3.0e-5}\n"
        "tiny:\n  title: Tiny\n  vram: {full_gb: 1, at_batch: 8}\n  trainers: [demo]\n  default_lr: {demo: 1.0e-3}\n"
    )
    load_catalog.cache_clear()
    assert load_catalog()["act"].default_lr == {"lerobot": 3e-5}
    assert load_catalog()["act"].params_m == 51.6, "fields not overridden stay"
    assert load_catalog()["tiny"].trainers == ["demo"]


def test_broken_user_catalog_is_one_paragraph(gw):
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    (paths.config_dir() / "policies.yaml").write_text("act:\n  vram: {full_gb: -1, at_batch: 8}\n")
    load_catalog.cache_clear()
    result = gw("plan", "demo-cpu")
    assert result.code == 2 and "act.vram.full_gb" in result.err and "Traceback" not in result.err
    (paths.config_dir() / "policies.yaml").write_text("- not a mapping\n")
    load_catalog.cache_clear()
    result = gw("plan", "demo-cpu")
    assert result.code == 2 and "YAML mapping" in result.err


def test_user_themes_load_and_bad_ones_are_skipped():
    paths.user_themes_dir().mkdir(parents=True)
    (paths.user_themes_dir() / "mine.yaml").write_text("name: mine\nprimary: '#ff8800'\ndark: true\n")
    (paths.user_themes_dir() / "broken.yaml").write_text("name: broken\nprimary: '#000'\nsparkle: 11\n")
    (paths.user_themes_dir() / "empty.yaml").write_text("just text\n")
    (paths.user_themes_dir() / "unparsable.yaml").write_text("name: [unclosed\n")
    themes, problems = load_themes()
    names = [t.name for t in themes]
    assert {"gpuwizard-dark", "gpuwizard-light", "terminal-16", "mine"} <= set(names) and "broken" not in names
    assert any("broken.yaml" in p and "sparkle" in p for p in problems) and any("empty.yaml" in p for p in problems)
    assert any("unparsable.yaml" in p for p in problems)
    assert next(t for t in themes if t.name == "terminal-16").ansi is True
