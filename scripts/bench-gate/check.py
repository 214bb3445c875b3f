#!/usr/bin/env python3
"""Checks benchmark JSON against the floors in floors.toml.

Usage: check.py FLOORS RESULTS_DIR [--suite NAME]

Every floor names a suite (the JSON file RESULTS_DIR/<suite>.json), a row (by its
"name"), a field and a bound (min or max). Bounds are ratios against a peer measured
in the same run, set well below the targets, so that noise passes and a 2x
regression does not. Exit 0 if every floor of the checked suites holds, 1 if one
does not, 2 if a row or field is missing (a renamed row must not pass silently).
"""

import json
import sys
import tomllib


def rows_of(doc):
    rows = doc.get("rows") if isinstance(doc, dict) else doc
    if not isinstance(rows, list):
        raise ValueError("no rows")
    return {r.get("name"): r for r in rows if isinstance(r, dict)}


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    floors_path, results = argv[1], argv[2]
    only = argv[argv.index("--suite") + 1] if "--suite" in argv else None
    with open(floors_path, "rb") as f:
        floors = tomllib.load(f)["floor"]
    worst = 0
    docs = {}
    for fl in floors:
        suite = fl["suite"]
        if only and suite != only:
            continue
        if suite not in docs:
            try:
                with open(f"{results}/{suite}.json") as f:
                    docs[suite] = rows_of(json.load(f))
            except (OSError, ValueError) as e:
                print(f"MISSING  {suite}: {e}")
                worst = max(worst, 2)
                docs[suite] = {}
                continue
        row = docs[suite].get(fl["row"])
        v = None if row is None else row.get(fl["field"])
        what = f"{suite} · {fl['row']} · {fl['field']}"
        if not isinstance(v, (int, float)):
            print(f"MISSING  {what}: {'no such row' if row is None else 'no value'}")
            worst = max(worst, 2)
            continue
        if "min" in fl:
            ok, bound = v >= fl["min"], f">= {fl['min']}"
        else:
            ok, bound = v <= fl["max"], f"<= {fl['max']}"
        print(f"{'ok ' if ok else 'LOW'}      {what} = {v:.3g} (floor {bound}; {fl['why']})")
        if not ok:
            worst = max(worst, 1)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv))
