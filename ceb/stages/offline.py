"""The embedded default backend: a critic and a hindsight labeler that are NOT language models.

They run the whole pipeline with no server and give a floor any LLM critic should beat; they read only what an
LLM stage would (never ``label``, ``reward`` or ``meta``). docs/data.md explains them per kind of stream; every
rule is here.

Offline critic (a retrieval-only estimator of the productive rate)::

    z_t = (sum_i w_i * y^_i + m * p0) / (sum_i w_i + m),   w_i = n_i * cos(kappa_t, kappa_i) ** gamma

over the retrieved precedents ``i`` (both classes); ``n_i`` is the number of records merged into ``i``
(:mod:`ceb.bank.policy`), ``p0 = (|B+| + 1) / (|B| + 2)`` the smoothed base rate, ``m`` the prior strength.
``z_t`` is multiplied by ``repetition_factor`` when the flag is set; with no bank (or ``static``) ``p0`` is 0.5.

Offline hindsight labeler: one deterministic vote copied ``V`` times, giving 0, 1, or no label: it *abstains*
when its rules have nothing to read, and an abstained step adds no bank record
(:class:`~ceb.stages.base.Abstention`).

Terminal domains (``shell``, ``sql``; an empty output is a reading). A step is 0 when one holds, else 1:

1. error: its observation matches :data:`ERROR_PATTERN`;
2. repeat: its action equals an earlier action of the trajectory (white space and case folded);
3. no change: its observation equals the previous step's;
4. retried: the next action has the same first :data:`RETRIED_PREFIX_CHARS` folded characters, whatever
   ``ceb.repetition_reading`` says: a re-run with a changed tail is a retry in hindsight (docs/design.md).

Web and mobile (``web``, ``mobile``). The default hindsight prompt shows no observation (the paper's appendix
template, :func:`~ceb.stages.hindsight.shows_observations`), so every step abstains (:data:`NO_OBSERVATION_SHOWN`);
with ``hindsight.gui_observations`` an empty observation abstains, and otherwise, by what it holds:

- The executed reference action (``--observation reference``, :data:`~ceb.data.converters.REFERENCE_OBSERVATION`,
  issue 32): 1 when the agent's action is that action, else 0. Web (``[tag] text -> OP: value``): the same
  operation (``HOVER``, ``ENTER`` read as ``CLICK``) on an element of the same folded text and, when the
  reference names an HTML tag rather than a role (``[span]``), of that tag; the value is not compared, as in the
  dataset's label. Mobile (``[TAP] (x, y) on [i] text``): the same type and, for a tap the same element ``[i]``,
  for typing the same text, for a swipe the same direction. It abstains when the reference names no element
  text (web) or touched no element (mobile), and when either action cannot be read.
- A page (URL, page text, screen description): 0 on an error page (:data:`ERROR_PAGE_PATTERN`,
  :data:`ERROR_URL_PATTERN`); else against the previous observation: a URL that changed is 1 ("navigated"), one
  a link click left unchanged 0, one another action left unchanged no label; page text identical is 0 ("no
  change"), else 1. With no previous observation of the same kind the step abstains. The repeat and retried
  rules are not used: on a page moving along the human's path, a repeated prediction can be right.

Any other domain: the terminal rules, except that an empty observation abstains.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

import orjson

from ceb.config import HindsightConfig
from ceb.data.converters import REFERENCE_OBSERVATION
from ceb.data.mind2web import NO_ELEMENT, canonical_op
from ceb.data.trajectory import Step, Trajectory
from ceb.stages.base import Abstention, CriticInput, CriticResult, HindsightResult
from ceb.stages.critic import normalize_action, repetition_flag
from ceb.stages.hindsight import majority_vote, shows_observations

__all__ = [
    "ERROR_PAGE_PATTERN",
    "ERROR_PATTERN",
    "ERROR_URL_PATTERN",
    "NO_OBSERVATION_SHOWN",
    "RETRIED_PREFIX_CHARS",
    "TERMINAL_DOMAINS",
    "OfflineCritic",
    "OfflineHindsight",
    "Verdict",
]

RETRIED_PREFIX_CHARS = 40
"""The "retried" rule's compared length, in folded characters; fixed (not ``ceb.repetition_prefix_chars``), so
that changing how the critic's flag reads leaves the offline labels as they were."""

ERROR_PATTERN = re.compile(
    r"(?im)(^|\b)(error|errno|exception|traceback|not found|no such file|command not found|"
    r"permission denied|syntax error|invalid option|unrecognized option|illegal option|usage:|"
    r"doesn't exist|does not exist|unknown column|you have an error in your sql)"
)
"""Observation text that marks a failed command or query."""

ERROR_PAGE_PATTERN = re.compile(
    r"(?i)\b(404 not found|error 404|page not found|403 forbidden|access denied|internal server error|"
    r"bad gateway|service unavailable|this site can['’]t be reached|err_[a-z_]+|something went wrong|"
    r"unfortunately,? [^\n]{0,60}? has stopped|keeps stopping|isn['’]t responding|no internet connection)\b"
)
"""Page or screen text that marks a failed page load or a crashed app (web and mobile; not shell output, where
:data:`ERROR_PATTERN` reads every ``error``: a page may well contain that word)."""

ERROR_URL_PATTERN = re.compile(
    r"(?i)^https?://\S*?(/(404|403|500|error|not-?found|page-?not-?found|access-?denied)(\.html?)?([/?#]|$)|[?&]error=)"
)
"""A URL of an error page: an error path segment (``/404``, ``/error``...) or an ``error=`` query parameter."""

TERMINAL_DOMAINS = frozenset({"shell", "sql"})
"""Domains whose observation is a command's output, where an empty output is a reading (the terminal rules)."""

_GUI_DOMAINS = frozenset({"web", "mobile"})
_URL = re.compile(r"^https?://\S+$", re.IGNORECASE)
_WEB_REFERENCE = re.compile(
    r"^\[(?P<tag>[^\]]*)\]\s*(?P<text>.*?)\s*->\s*(?P<op>[A-Za-z_]+)(?::\s?(?P<value>.*))?$", re.S
)
_WEB_ACTION = re.compile(r"^\[(?P<op>[^\]]+)\]\s*(?P<element>.*?)(?:\s->\s(?P<value>.*))?$", re.S)
_TAG = re.compile(r"^\s*[<\[](?P<tag>[^>\]]*)[>\]]\s*")
_MOBILE_ACTION = re.compile(r"^\[(?P<op>[A-Za-z_]+)\](?P<rest>.*)$", re.S)
_NUM = r"(-?\d+(?:\.\d+)?)"
_POINTS = re.compile(rf"^\s*\({_NUM},\s*{_NUM}\)(?:\s*->\s*\({_NUM},\s*{_NUM}\))?")
_ON_ELEMENT = re.compile(r"\son \[(\d+)\]")
# fmt: off
_HTML_ONLY_TAGS = frozenset({
    "a", "b", "div", "em", "font", "g", "h1", "h2", "h3", "h4", "h5", "h6", "i", "input", "label", "li", "nav", "ol",
    "p", "path", "section", "select", "small", "span", "svg", "td", "textarea", "th", "tr", "ul", "use",
})
# fmt: on
"""HTML tags that are no ARIA role. Mind2Web's ``[type]`` is the element's role when it has one, else its tag; a
``[type]`` in this set is therefore a tag, and an agent's element of another tag is another element."""
_TRUNCATED = "..."


class Verdict(NamedTuple):
    """One step's label (1, 0, ``None``: abstains) and the rule that gave it or why not (``""``: none fired)."""

    label: int | None
    rule: str


class OfflineCritic:
    """Similarity-weighted productive rate of the retrieved precedents, shrunk toward the base rate.

    Args:
        prior_strength: ``m``, weight of the base rate in units of one perfectly similar precedent.
        sharpness: ``gamma``, exponent on cosine similarity.
        repetition_factor: Multiplier applied when ``rho_t = 1``.
    """

    def __init__(self, prior_strength: float = 1.0, sharpness: float = 2.0, repetition_factor: float = 0.6) -> None:
        self.prior_strength = prior_strength
        self.sharpness = sharpness
        self.repetition_factor = repetition_factor

    async def score(self, inp: CriticInput) -> CriticResult:
        """Score ``inp`` from its precedents alone (see the module docstring for the formula)."""
        p0 = (inp.bank_positive + 1) / (inp.bank_size + 2) if inp.use_bank else 0.5
        hits = inp.retrieval.hits if inp.use_bank else ()
        w = [max(h.similarity, 0.0) ** self.sharpness * h.count for h in hits]  # a merged record weighs its count
        num = sum(wi * h.record.pseudo_label for wi, h in zip(w, hits, strict=True)) + self.prior_strength * p0
        z = num / (sum(w) + self.prior_strength)
        if inp.repetition_flag:
            z *= self.repetition_factor
        raw = orjson.dumps(
            {
                "score": round(z, 6),
                "base_rate": round(p0, 6),
                "precedents": len(hits),
                "weight": round(sum(w), 6),
            }
        ).decode()
        return CriticResult(score=z, raw=raw)


NO_OBSERVATION_SHOWN = "hindsight shows no observation on web and mobile (hindsight.gui_observations)"
"""Why every web and mobile step abstains by default (the module docstring)."""


class OfflineHindsight:
    """Rule-based hindsight labels from observations, abstaining without evidence (the module docstring).

    ``settings``: only ``gui_observations`` is read.
    """

    def __init__(self, settings: HindsightConfig | None = None) -> None:
        self.settings = settings or HindsightConfig()

    def rules(self, trajectory: Trajectory) -> list[Verdict]:
        """The :class:`Verdict` of each step, shape ``(T,)``; the rule set follows ``trajectory.domain``."""
        steps = trajectory.steps
        if not shows_observations(trajectory.domain, self.settings):
            return [Verdict(None, NO_OBSERVATION_SHOWN)] * len(steps)
        if trajectory.domain in _GUI_DOMAINS:
            return [_gui(trajectory.domain, steps, t) for t in range(len(steps))]
        repeats = _repeats(steps)
        if trajectory.domain in TERMINAL_DOMAINS:
            return [_terminal(steps, t, repeats[t]) for t in range(len(steps))]
        return [
            Verdict(None, "no observation") if not s.observation.strip() else _terminal(steps, t, repeats[t])
            for t, s in enumerate(steps)
        ]

    async def label(self, trajectory: Trajectory, votes: int) -> HindsightResult:
        """Apply the rules once; the ``votes`` votes are copies, over the steps not in ``abstained``."""
        fired = self.rules(trajectory)
        vote = tuple(v.label for v in fired if v.label is not None)
        abstained = tuple(Abstention(step=t, reason=v.rule) for t, v in enumerate(fired) if v.label is None)
        all_votes = (vote,) * max(votes, 1)
        soft, pseudo = majority_vote(all_votes)
        raw = orjson.dumps({"labels": [v.label for v in fired], "rules": [v.rule for v in fired]}).decode()
        return HindsightResult(
            votes=all_votes,
            soft_votes=soft,
            pseudo_labels=pseudo,
            raws=(raw,) * len(all_votes),
            abstained=abstained,
        )


# --- terminal domains ---------------------------------------------------------------------------------


def _repeats(steps: Sequence[Step]) -> list[bool]:
    """Whether each step's action equals an earlier one of the trajectory (folded); linear in its length."""
    seen: set[str] = set()
    out = []
    for s in steps:
        folded = normalize_action(s.action)
        out.append(folded in seen)
        seen.add(folded)
    return out


def _terminal(steps: Sequence[Step], t: int, repeat: bool) -> Verdict:
    s = steps[t]
    if ERROR_PATTERN.search(s.observation):
        return Verdict(0, "error")
    if repeat:
        return Verdict(0, "repeat")
    if t > 0 and s.observation.strip() == steps[t - 1].observation.strip():
        return Verdict(0, "no change")
    if t + 1 < len(steps) and repetition_flag(
        [s.action], steps[t + 1].action, window=1, reading="chars", prefix_chars=RETRIED_PREFIX_CHARS
    ):
        return Verdict(0, "retried")
    return Verdict(1, "")


# --- web and mobile -----------------------------------------------------------------------------------


def _gui(domain: str, steps: Sequence[Step], t: int) -> Verdict:
    s = steps[t]
    if not s.observation.strip():
        return Verdict(None, "no observation")
    if s.observation.startswith(REFERENCE_OBSERVATION):
        reference = s.observation[len(REFERENCE_OBSERVATION) :].strip()
        return _web_reference(s, reference) if domain == "web" else _mobile_reference(s, reference)
    return _page(steps, t)


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def _same_text(agent: str, reference: str) -> bool:
    """Equal once folded; an element text the converter cut to its budget (``...``) matches by its prefix."""
    if agent == reference:
        return True
    return agent.endswith(_TRUNCATED) and reference.startswith(agent[: -len(_TRUNCATED)].rstrip())


def _web_reference(s: Step, reference: str) -> Verdict:
    ref = _WEB_REFERENCE.match(reference)
    if ref is None:
        return Verdict(None, "reference action not readable")
    parsed = _WEB_ACTION.match(s.action.strip())
    op = s.op or (parsed["op"] if parsed else None)
    if not op:
        return Verdict(None, "action names no operation")
    if canonical_op(op) != canonical_op(ref["op"]):
        return Verdict(0, "other operation")
    element = s.element if s.element is not None else (parsed["element"] if parsed else None)
    if element is None or not element.strip() or element.strip() == NO_ELEMENT:
        return Verdict(0, "no element")
    ref_text = _fold(ref["text"])
    if not ref_text:
        return Verdict(None, "reference names no element text")
    tag = _TAG.match(element)
    ref_tag = ref["tag"].strip().lower()
    if tag is not None and ref_tag in _HTML_ONLY_TAGS and tag["tag"].strip().lower() != ref_tag:
        return Verdict(0, "other element")
    text = _fold(_TAG.sub("", element, count=1))
    if not text:
        return Verdict(None, "element has no text to compare")
    return Verdict(1, "reference action") if _same_text(text, ref_text) else Verdict(0, "other element")


class _MobileAction(NamedTuple):
    op: str
    element: str | None
    text: str | None
    direction: tuple[int, int] | None


def _mobile_action(text: str) -> _MobileAction | None:
    """An action as :func:`~ceb.data.amex_screen.describe_action` writes it (``[TAP] (x, y) on [i] text``...), read."""
    m = _MOBILE_ACTION.match(text.strip())
    if m is None:
        return None
    op, rest = m["op"].upper(), m["rest"]
    points = _POINTS.match(rest)
    direction = None
    if points is not None and points.group(3) is not None:
        dx = float(points.group(3)) - float(points.group(1))
        dy = float(points.group(4)) - float(points.group(2))
        # The dominant axis and its sign: a swipe's direction, whatever its length.
        direction = (_sign(dx), 0) if abs(dx) >= abs(dy) else (0, _sign(dy))
    on = _ON_ELEMENT.search(rest) if op == "TAP" else None
    typed = None
    if op == "TYPE":
        try:
            typed = _fold(str(orjson.loads(rest.strip())))
        except orjson.JSONDecodeError:
            typed = _fold(rest)
    return _MobileAction(op, on.group(1) if on else None, typed, direction)


def _sign(x: float) -> int:
    return int(x > 0) - int(x < 0)


def _mobile_reference(s: Step, reference: str) -> Verdict:
    ref = _mobile_action(reference)
    if ref is None:
        return Verdict(None, "reference action not readable")
    act = _mobile_action(s.action)
    if act is None:
        return Verdict(None, "action not readable")
    if act.op != ref.op:
        return Verdict(0, "other operation")
    if act.op == "TAP":
        if ref.element is None:
            return Verdict(None, "reference touched no element")
        if act.element is None:
            return Verdict(0, "no element")
        return Verdict(1, "reference action") if act.element == ref.element else Verdict(0, "other element")
    if act.op == "TYPE":
        return Verdict(1, "reference action") if act.text == ref.text else Verdict(0, "other text")
    if act.op == "SWIPE":
        if act.direction is None or ref.direction is None:
            return Verdict(None, "swipe without points")
        return Verdict(1, "reference action") if act.direction == ref.direction else Verdict(0, "other direction")
    return Verdict(1, "reference action")  # PRESS_BACK, TASK_COMPLETE...: the type is the whole action


def _is_url(text: str) -> bool:
    return _URL.match(text) is not None


def _page(steps: Sequence[Step], t: int) -> Verdict:
    s = steps[t]
    page = s.observation.strip()
    url = _is_url(page)
    error = ERROR_URL_PATTERN.match(page) if url else ERROR_PAGE_PATTERN.search(page)
    if error is not None:
        return Verdict(0, "error page")
    before = steps[t - 1].observation.strip() if t > 0 else ""
    if not before or before.startswith(REFERENCE_OBSERVATION.strip()) or _is_url(before) != url:
        return Verdict(None, "no earlier page to compare with")
    if not url:
        return Verdict(0, "no change") if page == before else Verdict(1, "page changed")
    if page.rstrip("/") != before.rstrip("/"):
        return Verdict(1, "navigated")
    if _link_click(s):
        return Verdict(0, "link did not navigate")
    return Verdict(None, "URL unchanged; the action need not navigate")


def _link_click(s: Step) -> bool:
    parsed = _WEB_ACTION.match(s.action.strip())
    op = s.op or (parsed["op"] if parsed else "")
    element = s.element if s.element is not None else (parsed["element"] if parsed else "")
    tag = _TAG.match(element or "")
    return canonical_op(op) == "CLICK" and tag is not None and tag["tag"].strip().lower() in ("a", "link")
