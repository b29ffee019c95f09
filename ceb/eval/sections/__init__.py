"""The sections of ``report.md``, declared here in report order: a section's number is its place in this list.

Adding a section is a function decorated with :func:`section` in a module of this package and one line below
where it belongs (``tests/eval/test_report_sections.py`` shows it).
"""

from ceb.eval.sections import appendix, averaging, calibration, deployment, label_free, paired
from ceb.eval.sections.base import SECTIONS, ReportContext, Section, registered_sections, section

__all__ = [
    "SECTIONS",
    "ReportContext",
    "Section",
    "appendix",
    "averaging",
    "calibration",
    "deployment",
    "label_free",
    "paired",
    "registered_sections",
    "section",
]

for _name, _section in (
    ("main-results", calibration._main_results),
    ("paired-differences", paired._paired),
    ("stream-averaging", averaging._stream_averaging_section),
    ("depth", calibration._depth),
    ("reliability", calibration._reliability),
    ("selective-execution", deployment._selective),
    ("task-success", deployment._task_success_section),
    ("label-shift", calibration._label_shift_section),
    ("ablation", appendix._ablation),
    ("gt-oracle", appendix._gt_oracle),
    ("vote-sweep", appendix._vote_sweep_section),
    ("k-sweep", appendix._k_sweep_section),
    ("token-cost", appendix._token_cost),
    ("retrieval", appendix._retrieval),
    ("label-free", label_free._label_free),
):
    SECTIONS.register(_name, _section)
