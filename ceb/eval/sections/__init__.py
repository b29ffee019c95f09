"""The sections of ``report.md``, declared here in report order: a section's number is its place in this list.

Adding a section is a function decorated with :func:`section` in a module of this package and one line below
where it belongs (``tests/eval/test_report_sections.py`` shows it).
"""

from ceb.eval.sections import appendix, averaging, calibration, deployment, paired
from ceb.eval.sections.base import SECTIONS, ReportContext, ReportWriter, Section, registered_sections, section

__all__ = [
    "SECTIONS",
    "ReportContext",
    "ReportWriter",
    "Section",
    "appendix",
    "averaging",
    "calibration",
    "deployment",
    "paired",
    "registered_sections",
    "section",
]

for _name, _section in (
    ("main-results", calibration.main_results),
    ("paired-differences", paired.paired),
    ("stream-averaging", averaging.stream_averaging_section),
    ("depth", calibration.depth),
    ("reliability", calibration.reliability),
    ("selective-execution", deployment.selective),
    ("task-success", deployment.task_success_section),
    ("label-shift", calibration.label_shift_section),
    ("ablation", appendix.ablation),
    ("gt-oracle", appendix.gt_oracle),
    ("vote-sweep", appendix.vote_sweep_section),
    ("k-sweep", appendix.k_sweep_section),
    ("token-cost", appendix.token_cost),
    ("retrieval", appendix.retrieval),
):
    SECTIONS.register(_name, _section)
