"""tests/: make the sibling helper modules (broken_backends) importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
