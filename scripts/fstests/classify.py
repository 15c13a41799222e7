#!/usr/bin/env python3
"""Compares one fstests run with its expected-failures list.

    classify.py FS OUT EXPECTED_LIST SECONDS

OUT is the run's directory (check.log, results/); EXPECTED_LIST has one
line per test, `generic/NNN  reason`, `#` comments and blank lines; a
reason that starts with `[flaky]` marks a test that fails only sometimes
(its passes are noted, not reported as a list to shrink). Prints
the pass / fail / not-run counts, every failure not on the list (with the
head of its output diff and of its .full log), the listed tests that
passed (the list should lose them), and the most common reasons tests did
not run. Writes OUT/verdict.txt. Exits 1 on an unexpected failure or when
check left no summary (it died or timed out).
"""

import collections
import os
import re
import sys


def read_list(path):
    expected = {}
    if not os.path.exists(path):
        return expected
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if not re.fullmatch(r"[a-z0-9]+/\d+", parts[0]) or len(parts) < 2:
                sys.exit(f"{path}:{n}: want `generic/NNN  reason`: {line!r}")
            expected[parts[0]] = parts[1]
    return expected


def summary_line(log, prefix):
    """The tests on check's last `PREFIX: a b c` line."""
    found = None
    for line in log.splitlines():
        if line.startswith(prefix + ": "):
            found = line[len(prefix) + 2 :].split()
    return found


def head(path, n):
    try:
        with open(path, errors="replace") as f:
            return [next(f).rstrip("\n") for _ in range(n)]
    except (OSError, StopIteration):
        return []


def tail(path, n):
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in f.readlines()[-n:]]
    except OSError:
        return []


def main():
    fs, out, list_path, secs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    expected = read_list(list_path)
    with open(os.path.join(out, "check.log"), errors="replace") as f:
        log = f.read()
    ran = summary_line(log, "Ran")
    notrun = summary_line(log, "Not run") or []
    failures = set(summary_line(log, "Failures") or [])
    verdict = []
    ok = True
    if ran is None:
        ran = []
        ok = False
        verdict.append(f"{fs}: check printed no summary (it died or timed out)")
    # check's `Ran:` names every test it started, the ones that found
    # themselves not applicable (`Not run:`) too.
    passed = [t for t in ran if t not in failures and t not in set(notrun)]
    unexpected = sorted(failures - expected.keys())
    listed_failed = sorted(failures & expected.keys())
    listed_passed = sorted(set(passed) & expected.keys())
    to_drop = [t for t in listed_passed if not expected[t].startswith("[flaky]")]
    results = os.path.join(out, "results")

    print(f"fstests: {fs}: {len(passed)} passed, {len(failures)} failed "
          f"({len(listed_failed)} expected, {len(unexpected)} unexpected), "
          f"{len(notrun)} not run, in {secs // 60} min {secs % 60} s; "
          f"expected-failures list: {len(expected)} tests")
    for t in unexpected:
        print(f"UNEXPECTED FAILURE: {fs}: {t}")
        bad = os.path.join(results, t + ".out.bad")
        diff_lines = []
        # check prints each failure's diff into its log, after the test's line.
        m = re.search(r"^" + re.escape(t) + r"\b.*?(?=^\S+/\d+ |\Z)", log, re.S | re.M)
        if m:
            diff_lines = m.group(0).splitlines()[:25]
        for line in diff_lines:
            print("    " + line)
        full = tail(os.path.join(results, t + ".full"), 8)
        if full:
            print(f"    ... {t}.full ends:")
            for line in full:
                print("      " + line)
        if not diff_lines and os.path.exists(bad):
            for line in head(bad, 15):
                print("    " + line)
    for t in listed_passed:
        if expected[t].startswith("[flaky]"):
            print(f"passed this time (listed as flaky): {fs}: {t}")
        else:
            print(f"PASSED BUT LISTED: {fs}: {t} ({expected[t]}): remove it from "
                  f"{os.path.basename(list_path)}")

    reasons = collections.Counter()
    for t in notrun:
        lines = head(os.path.join(results, t + ".notrun"), 1)
        reasons[lines[0] if lines else "(no reason recorded)"] += 1
    if reasons:
        print(f"fstests: {fs}: why {len(notrun)} tests did not run (most common first):")
        for reason, n in reasons.most_common(25):
            print(f"  {n:4d}  {reason}")

    if unexpected:
        ok = False
    verdict.append(
        f"{fs}: {len(passed)} passed, {len(failures)} failed ({len(unexpected)} unexpected), "
        f"{len(notrun)} not run, {len(to_drop)} listed but passed, {secs}s"
        + ("" if ok else " -- FAILED"))
    with open(os.path.join(out, "verdict.txt"), "w") as f:
        f.write("\n".join(verdict) + "\n")
    for v in verdict[:-1]:
        print(v)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
