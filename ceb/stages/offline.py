"""The embedded default backend: a critic and a hindsight labeler that are NOT language models.

They let ``ceb`` run end to end on a laptop with no server, exercise every part of the pipeline (bank,
retrieval, ordering, hindsight, metrics) on real data, and give a floor any LLM critic should beat. They
read only what an LLM stage would read: the blinded trajectory and the critic's input. Never ``label``,
``reward`` or ``meta``.

Offline critic (a retrieval-only estimator of the productive rate)::

    z_t = (sum_i w_i * y^_i + m * p0) / (sum_i w_i + m),   w_i = n_i * cos(kappa_t, kappa_i) ** gamma

over the retrieved precedents ``i`` (both classes), where ``n_i`` is the number of records merged into ``i`` (1
unless the bank compresses near-duplicates, :mod:`ceb.bank.policy`), ``p0 = (|B+| + 1) / (|B| + 2)`` is the bank's
smoothed pseudo-label base rate and ``m`` the prior strength. If the repetition flag is set, ``z_t`` is
multiplied by ``repetition_factor``. With an empty bank (or the bank-free ``static`` method) it is the
uninformed prior 0.5 (times the repetition factor when set).

Offline hindsight labeler (rules over observations; one deterministic vote copied ``V`` times). Each step gets
0 (unproductive), 1 (productive) or no label: the labeler *abstains* when its rules have nothing to read, and
an abstained step adds no record to the bank (:class:`~ceb.stages.base.Abstention`). A guessed label would
come back through retrieval as if it were evidence; with no records at all the critic stays at its prior 0.5,
which is uninformed, not the stream's positive rate (only labels give that). The rules depend on the domain,
because what an observation carries does.

Terminal domains (``shell``, ``sql``: the observation is the command's output, and an empty output is a
reading, the command ran silently). A step is 0 when one of these holds, else 1:

1. error: its observation matches :data:`ERROR_PATTERN` (shell and SQL error messages);
2. repeat: its action equals an earlier action of the trajectory (white space and case folded);
3. no change: its observation equals the previous step's observation;
4. retried: the next action repeats it (same first :data:`RETRIED_PREFIX_CHARS` = 40 characters, folded), i.e.
   the agent had to try again. This rule keeps its own reading whatever ``ceb.repetition_reading`` says: a
   command re-run with a changed tail is a retry in hindsight (the agent had to fix it), while the critic's flag
   ``rho_t`` tells the critic the action *repeats*, which a shared head is not (docs/design.md).

Web and mobile (``web``, ``mobile``). The labeller reads what the hindsight prompt shows, and the web and mobile
prompt follows the paper's appendix template: operation, element, value and reasoning, no observation
(:func:`~ceb.stages.hindsight.shows_observations`). Those alone carry no evidence these rules could read (an
offline benchmark's page moves on along the human's path whatever the agent did), so by default every web and
mobile step abstains ("hindsight shows no observation"), the bank stays empty and the offline critic stays at its
prior. With ``hindsight.gui_observations`` the observations are shown and read. An empty observation is no
reading (offline benchmarks record no response; many web logs keep none): the step abstains. Otherwise, by
what the observation holds:

- The executed reference action (``reference action executed: ...``, what the Mind2Web and AMEX converters
  write with ``--observation reference`` only, :data:`~ceb.data.converters.REFERENCE_OBSERVATION`; it shows the
  labeller the answer the labels are computed from, issue 32): the episode moved on by the human's action, so
  the step is 1 when the agent's action is that action, else 0. Web (Mind2Web's ``[tag] text -> OP: value``):
  the same operation (``HOVER`` and ``ENTER`` read as ``CLICK``, as the dataset reads them) on an element of
  the same text (case and white space folded) and, when the reference names an HTML tag rather than a role
  (``[span]``, ``[div]``), of that tag; the typed value is not compared, as the dataset's own step label does
  not. Mobile (AMEX's ``[TAP] (x, y) on [i] text``): the same action type and, for a tap the same element
  ``[i]`` of the screen, for typing the same text, for a swipe the same direction. It abstains when the
  reference names no element text (web) or touched no element (mobile), and when either action cannot be
  read. These rules come close to the datasets' own step labels, which is why that observation mode is no
  default.
- A page (a URL, page text or a screen description, as a user's own logs hold, or the next page or screen the
  converters write by default): 0 when it is an error page
  (:data:`ERROR_PAGE_PATTERN`, :data:`ERROR_URL_PATTERN`). Else it is compared with the previous step's
  observation, the page the action started from: for URLs, 1 when the URL changed ("navigated"), 0 when a
  click on a link left it unchanged, and no label when another action left it unchanged (typing or opening
  a menu need not navigate); for page text, 0 when it is identical ("no change"), else 1. With no previous
  observation of the same kind (the first step, or after an empty one) the step abstains.

The repeat and retried rules are not used there: on a page that moved on along the human's path, a repeated
prediction can be right.

Any other domain: the terminal rules, except that an empty observation abstains (silence is a reading only
where the environment is known to be a terminal).
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
"""The hindsight "retried" rule's compared length, in folded characters: the next action starting with the same
40 characters is a retry. Fixed, and not ``ceb.repetition_prefix_chars`` (which only the critic's ``chars``
reading reads), so that changing how the critic's flag reads leaves the offline labels as they were."""

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
"""A URL of an error page: an error path segment (``/404``, ``/error``, ``/not-found``...) or an ``error=``
query parameter."""

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
    """The offline labeler's answer for one step.

    Attributes:
        label: 1 (productive), 0 (unproductive), or ``None`` when it abstains.
        rule: The rule that gave the label, or why it abstains; ``""`` for a terminal step no rule fired on.
    """

    label: int | None
    rule: str


class OfflineCritic:
    """Similarity-weighted productive rate of the retrieved precedents, shrunk toward the base rate.

    Args:
        prior_strength: ``m``, weight of the base rate in units of one perfectly similar precedent.
        sharpness: ``gamma``, exponent on cosine similarity (higher trusts the closest precedents more).
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
    """Rule-based hindsight labels from observations, abstaining without evidence (see the module docstring).

    Args:
        settings: The labeller's settings; only ``gui_observations`` is read (the defaults when ``None``).
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
        """Apply the rules once; the ``votes`` votes are identical copies, so soft votes are 0 or 1.

        Returns:
            Votes over the steps the rules label; the others are in ``abstained`` with the reason. When every
            step abstains the votes are empty and the trajectory adds nothing to the bank.
        """
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
    """An action as :func:`~ceb.data.amex_screen.describe_action` writes it, read; ``None`` when it is not one.

    The forms: ``[TAP] (x, y) on [i] text``, ``[SWIPE] (x, y) -> (x, y)``, ``[TYPE] "text"``, ``[PRESS_BACK]``.
    """
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
