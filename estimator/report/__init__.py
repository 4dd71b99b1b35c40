"""Identification reports: parameter tables, RLS convergence, model validation (FIT, torque
residuals), identifiability and loop timing of a recorded run, as HTML with PNG figures.

    from estimator.report import build_report
    result = build_report(run_path, validation_run_path, out_dir)

matplotlib is the optional extra `report`; without it `build_report` raises `ReportError`.
"""

from estimator.report.build import ReportResult, build_report
from estimator.report.runs import ReportError

__all__ = ["ReportError", "ReportResult", "build_report"]
