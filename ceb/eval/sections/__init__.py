"""The numbered sections of ``report.md``, registered in order; importing this package registers them all."""

from ceb.eval.sections import appendix, averaging, calibration, deployment
from ceb.eval.sections.base import ReportContext, ReportWriter, Section, registered_sections, section

__all__ = [
    "ReportContext",
    "ReportWriter",
    "Section",
    "appendix",
    "averaging",
    "calibration",
    "deployment",
    "registered_sections",
    "section",
]
