import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "src", "shardproof", "zoo")
for d in (ZOO, os.path.join(ZOO, "bugs"), os.path.join(ZOO, "train"), os.path.join(ZOO, "train", "bugs")):
    if d not in sys.path:
        sys.path.insert(0, d)

# Mutation operators (issue 14's classes) whose survivors wait for a fix on another branch:
# operator -> the class and defect. Tests pin them as strict xfails or leave them out of
# the no-survivor checks; remove an entry when its fix lands.
MUTANTS_PENDING = {
    "cast-dtype": "casts: a partial sum truncated to int/bool before its reduction is verified (class 1)",
    "fill-extent": "relations: a fill's local extent is proved equal to the global one (class 4)",
    "ignore-index": "relations: targets with ignore_index are verified against a program that ignores none (class 7)",
}
