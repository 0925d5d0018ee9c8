import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
for d in (EXAMPLES, os.path.join(EXAMPLES, "bugs"), os.path.join(EXAMPLES, "train"),
          os.path.join(EXAMPLES, "train", "bugs")):
    if d not in sys.path:
        sys.path.insert(0, d)
