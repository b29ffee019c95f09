"""Where the shared material is: ``../shared`` beside the checkout (CI puts it there), or $CEB_SHARED."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("CEB_SHARED", REPO.parent / "shared"))
INTERCODE = SHARED / "data" / "intercode"
