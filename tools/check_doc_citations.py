#!/usr/bin/env python3
"""Every Markdown document a tracked file cites (docs/PS.md, ARCHITECTURE.md, ...) exists.

A citation resolves against the repository's root, the citing file's folder, or docs/. Run from
anywhere inside the repository; exits 1 and lists each dangling citation as file:line.
"""
import pathlib
import re
import subprocess
import sys

# A path ending in .md that is not part of a longer word, URL, path or variable ($dir/README.md,
# ${dir}/README.md: a script's, resolved when it runs).
CITATION = re.compile(r"(?<![\w/.:${}-])((?:[\w.-]+/)*[\w-]+\.md)\b")
TEXT_SUFFIXES = {".md", ".h", ".cc", ".c", ".py", ".sh", ".cmake", ".txt", ".in", ".json"}


def main():
    root = pathlib.Path(
        subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True,
                       text=True).stdout.strip())
    files = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True,
                           text=True).stdout.split()
    dangling = []
    checked = 0
    for name in files:
        path = root / name
        if path.suffix not in TEXT_SUFFIXES and path.name not in ("CMakeLists.txt", "Makefile"):
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for number, line in enumerate(lines, 1):
            for cited in CITATION.findall(line):
                checked += 1
                candidates = (root / cited, path.parent / cited, root / "docs" / cited)
                if not any(c.is_file() for c in candidates):
                    dangling.append(f"{name}:{number}: cites {cited}, which does not exist")
    for line in dangling:
        print(line)
    print(f"{checked} citations of Markdown documents, {len(dangling)} dangling")
    return 1 if dangling else 0


if __name__ == "__main__":
    sys.exit(main())
