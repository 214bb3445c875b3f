"""The verdict on a redis-py suite run: every failing test must be listed in the
expected-failures file with the command it needs, and that command must be one
docs/resp.md names as not supported. Anything else (a wrong answer, a crash, an
unlisted failure) fails the run.

    python verdict.py JUNIT_XML EXPECTED_FAILURES DOCS_RESP_MD
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET


def outcomes(junit: str) -> dict[str, tuple[str, str]]:
    """Test id ("file::Class::test[param]") -> (passed, failed or skipped; why)."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "")
        parts = module.split(".")
        # "tests.test_commands.TestRedisCommands" -> tests/test_commands.py::TestRedisCommands
        for i in range(len(parts), 0, -1):
            if parts[i - 1].startswith("test_"):
                path = "/".join(parts[:i]) + ".py"
                rest = parts[i:]
                break
        else:
            path, rest = module, []
        tid = "::".join([path, *rest, case.get("name", "")])
        why = ""
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                why = (child.get("message") or "").splitlines()[0][:200] if child.get("message") else ""
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "skipped"
        out[tid] = (outcome, why)
    return out


def expected(path: str) -> dict[str, tuple[str, str]]:
    """Test id -> (command, why) from lines `TEST_ID  COMMAND  why ...`."""
    out = {}
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split(None, 2)
        if len(fields) < 2:
            sys.exit(f"{path}:{n}: want `TEST_ID COMMAND [why]`, got {line!r}")
        # `SELECT_n` names what the docs spell `SELECT n`.
        out[fields[0]] = (fields[1].replace("_", " "), fields[2] if len(fields) > 2 else "")
    return out


def unsupported(docs: str) -> set[str]:
    """Commands and option names docs/resp.md lists under "Not supported"."""
    text = open(docs, encoding="utf-8").read()
    m = re.search(r"^Not supported, .*?(?=\n\n)", text, re.S | re.M)
    if not m:
        sys.exit(f"{docs}: no 'Not supported, ...' paragraph")
    return {w.upper() for w in re.findall(r"`([A-Za-z][A-Za-z ._-]*)`", m.group(0))}


def main() -> int:
    junit, listed_path, docs = sys.argv[1:4]
    try:
        got = outcomes(junit)
    except (OSError, ET.ParseError) as e:
        print(f"redis-py suite: FAILED: pytest wrote no report ({e}); see its output above")
        return 1
    if not got:
        print("redis-py suite: FAILED: no test ran")
        return 1
    listed = expected(listed_path)
    refused = unsupported(docs)
    counts = {k: sum(1 for v, _ in got.values() if v == k) for k in ("passed", "failed", "skipped")}
    print(
        f"redis-py suite: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped"
    )
    bad = []
    for tid, (outcome, why) in sorted(got.items()):
        if outcome != "failed":
            continue
        if tid not in listed:
            bad.append(f"  {tid}: failed and is not listed in {listed_path}\n      {why}")
            continue
        command = listed[tid][0].upper()
        if command not in refused:
            bad.append(f"  {tid}: listed as needing {command}, which {docs} does not list as not supported")
    for tid, (command, _) in sorted(listed.items()):
        if got.get(tid, ("",))[0] == "passed":
            print(f"  note: {tid} (listed for {command}) passes now; drop it from the list")
    expected_failed = sum(1 for t, (v, _) in got.items() if v == "failed" and t in listed)
    print(f"  {expected_failed} failures, each needing a command docs/resp.md lists as not supported")
    if bad:
        print("redis-py suite: FAILED")
        print("\n".join(bad))
        return 1
    print("redis-py suite: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
