"""`presets copy` and `presets show` as the example presets' headers tell a new user to start (issue 39 item 2)."""

from __future__ import annotations


def test_presets_show_into_a_file_gives_the_preset_alone(gw, tmp_path):
    shown = gw("presets", "show", "example-lerobot-act")
    assert shown.code == 0
    assert not shown.out.startswith("# /")  # the path is for the eye, on stderr: never a line the copy carries
    assert "example-lerobot-act.yaml" in shown.err
    mine = tmp_path / "my-act.yaml"
    mine.write_text(shown.out.replace("name: example-lerobot-act", "name: my-act"))
    assert gw("presets", "show", str(mine)).out == mine.read_text()


def test_presets_copy_writes_the_users_own_preset_that_then_checks_without_a_refusal(gw, tmp_path):
    copied = gw("presets", "copy", "example-lerobot-act", "my-act")
    target = tmp_path / "config" / "presets" / "my-act.yaml"
    assert copied.code == 0, copied.err
    assert str(target) in copied.out  # says where, to edit it there
    assert "name: my-act" in target.read_text()
    assert gw("presets", "copy", "example-lerobot-act", "my-act").code == 2  # never over the user's own
    listed = gw("presets", "list").out
    assert any(line.startswith("my-act ") and " user " in line for line in listed.splitlines())
    assert "not written by you" not in gw("plan", "my-act").err


def test_presets_copy_refuses_a_foreign_preset_that_runs_its_own_code(gw, tmp_path):
    foreign = tmp_path / "downloaded.yaml"
    text = gw("presets", "show", "demo-cpu").out
    foreign.write_text(text.replace("name: demo-cpu", "name: downloaded") + "launch:\n  python: /tmp/evil/python\n")
    refused = gw("presets", "copy", str(foreign), "mine")
    assert refused.code == 2
    assert "launch.python" in refused.err and "presets trust" in refused.err
    assert not (tmp_path / "config" / "presets" / "mine.yaml").exists()
