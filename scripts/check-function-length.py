#!/usr/bin/env python3
"""Fails when a Swift function or initializer (outside generated files) is longer than 70 lines, counted from its
declaration to its closing brace. Long functions hide their rules; split them into named steps."""
import os
import re
import sys

LIMIT = 70
DECLARATION = re.compile(
    r'^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|private|fileprivate|internal|package|static|class|override|mutating|nonisolated|final|'
    r'convenience|required)\s+)*(func\s+[^\s(<]+|init[?!]?)\s*[(<]')


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    for start, line in enumerate(lines):
        match = DECLARATION.match(line)
        if not match:
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            code = re.sub(r'"(?:\\.|[^"\\])*"', '""', lines[end]).split("//")[0]
            for ch in code:
                if ch == "{":
                    depth, opened = depth + 1, True
                elif ch == "}":
                    depth -= 1
            if opened and depth <= 0:
                yield match.group(1), start + 1, end - start + 1
                break
            if not opened and end > start + 8:  # a protocol requirement: no body
                break


long = []
for root in sys.argv[1:] or ["Sources", "Tests"]:
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(folder, name)
            if not name.endswith(".swift") or "swift-format-ignore-file" in open(path, encoding="utf-8").read(200):
                continue
            long += [(n, f"{path}:{line}", name_) for name_, line, n in functions(path) if n > LIMIT]
for lines, where, name in sorted(long, reverse=True):
    print(f"{where}: {name} is {lines} lines (at most {LIMIT})")
sys.exit(1 if long else 0)
