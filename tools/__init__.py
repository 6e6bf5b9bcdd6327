"""tasks.py's helpers, importable before .venv exists (the standard library only).

* ``torch_install``: which torch build a setup installs (the CPU build everywhere) and from where
* ``workspace``: the learner's workspace and the JupyterLab command that serves it
* ``test_plan``: what ``test`` runs: lint targets, the unit-test and nbval commands, stages
* ``cli``: the command line's parser, its refusals ("did you mean --reset?") and a script's
  own argparse parser run on the arguments tasks.py passes on to it
* ``student_lab/``: the Jupyter configuration of the student's lab (nbgrader's panels off)
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
