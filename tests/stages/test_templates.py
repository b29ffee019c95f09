import pytest

from ceb.errors import ConfigError
from ceb.stages import PROMPT_KINDS, CriticInput, PromptSet, clip, critic_context
from ceb.stages.templates import target


def test_every_packaged_family_is_complete_and_renders():
    ps = PromptSet()
    assert {"shell", "sql", "web", "mobile", "generic"} <= set(ps.families())
    ctx = critic_context(
        CriticInput(
            domain="web",
            task="buy shoes",
            step=0,
            state="<div>",
            action="[CLICK] Buy",
            op="CLICK",
            element="<button> Buy",
            value=None,
            reasoning="cart is full",
        )
    )
    for fam in ("shell", "sql", "web", "mobile", "generic"):
        system, user = ps.messages(fam, "critic", ctx)
        assert "buy shoes" in user["content"] and '"score"' in system["content"]


def test_domains_word_the_state_and_action_differently():
    ps = PromptSet()
    ctx = critic_context(
        CriticInput(domain="x", task="t", step=0, state="s", action="a", op="CLICK", element="<button> Buy")
    )
    shell = ps.render("shell", "critic_user", ctx)
    web = ps.render("web", "critic_user", ctx)
    sql = ps.render("sql", "critic_system", ctx)
    assert "Terminal output before this command" in shell
    assert "Current page HTML" in web and "operation: CLICK" in web and "element: <button> Buy" in web
    assert "query" in sql and "database" in sql


def test_unknown_domain_falls_back_to_generic():
    assert PromptSet().family("robotics") == "generic"
    assert PromptSet().family("sql") == "sql"


def test_user_prompt_dir_replaces_a_template(tmp_path):
    (tmp_path / "shell").mkdir()
    for kind in PROMPT_KINDS:
        (tmp_path / "shell" / f"{kind}.j2").write_text(f"MINE {kind} {{{{ task }}}}")
    ps = PromptSet(tmp_path)
    ctx = critic_context(CriticInput(domain="shell", task="T", step=0, state="", action="ls"))
    assert ps.render("shell", "critic_user", ctx) == "MINE critic_user T\n"
    assert "Task: T" in ps.render("sql", "critic_user", ctx)  # other families still ours


def test_template_errors_name_the_template(tmp_path):
    (tmp_path / "shell").mkdir()
    for kind in PROMPT_KINDS:
        (tmp_path / "shell" / f"{kind}.j2").write_text("{{ no_such_variable }}")
    ps = PromptSet(tmp_path)
    with pytest.raises(ConfigError, match="shell/critic_user.j2"):
        ps.render("shell", "critic_user", {})
    with pytest.raises(ConfigError, match="does not exist"):
        PromptSet(tmp_path / "missing")


def test_clip_keeps_head_and_tail():
    text = "HEAD" + "x" * 1000 + "TAIL"
    out = clip(text, 100)
    assert out.startswith("HEAD") and out.endswith("TAIL") and " [...] " in out
    assert len(out) < 160
    assert clip("short", 100) == "short" and clip(None, 10) == ""


@pytest.mark.parametrize(
    ("action", "op", "element", "value", "shown"),
    [
        ("[CLICK] <button> Search", "CLICK", "<button> Search", None, "<button> Search"),
        ("[TYPE] <input> q -> bread", "TYPE", "<input> q", "bread", "<input> q"),
        ("[TYPE] (no element) -> bread", "TYPE", None, "bread", "(no element)"),
        ("[TAP] (151, 100) on [3] Search", "TAP", "[3] Search", None, "(151, 100) on [3] Search"),
        ('[TYPE] "say \\"hi\\""', "TYPE", "[2] Message", 'say "hi"', "[2] Message"),
        ("[PRESS_BACK]", "PRESS_BACK", None, None, "(no element)"),
        ("click the search box", "CLICK", "<input> q", None, "<input> q"),  # not written as [op] ...
        ("click the search box", None, None, None, "click the search box"),
    ],
)
def test_target_is_what_the_step_acts_on_without_its_operation_or_value(
    action: str, op: str | None, element: str | None, value: str | None, shown: str
) -> None:
    assert target(action, op, element, value) == shown
