import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "src", "shardproof", "zoo")
for d in (ZOO, os.path.join(ZOO, "bugs"), os.path.join(ZOO, "train"), os.path.join(ZOO, "train", "bugs")):
    if d not in sys.path:
        sys.path.insert(0, d)
