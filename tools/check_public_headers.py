#!/usr/bin/env python3
"""The public headers (include/bx/) hold only what a user calls.

- They include only the standard library, system headers and other public headers ("bx/...").
- No accessor named core() and no Impl/Core type outside a private section: a test or a tool of
  the library reaches an implementation through an internal header (src/ps/service/
  ps_internals.h), never through the installed API.

Run from anywhere inside the repository; exits 1 and lists each finding as file:line.
"""
import pathlib
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
ACCESS = re.compile(r"^\s*(public|private|protected)\s*:")
CLASS_HEAD = re.compile(r"^\s*(class|struct)\s+(BX_EXPORT\s+)?\w+[^;]*\{")
IMPL_TYPE = re.compile(r"^\s*(class|struct)\s+(\w*(Impl|Core))\s*;")
CORE_ACCESSOR = re.compile(r"\bcore\s*\(\s*\)")


def check(path, rel):
    findings = []
    depth = 0
    classes = []  # [body's brace depth, access in force] of each open class, innermost last
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        code = line.split("//", 1)[0]
        include = INCLUDE.match(code)
        if include and include.group(1) == '"' and not include.group(2).startswith("bx/"):
            findings.append(f"{rel}:{number}: includes \"{include.group(2)}\", not a public header")
        head = CLASS_HEAD.match(code)
        if head:
            classes.append([depth + 1, "private" if head.group(1) == "class" else "public"])
        label = ACCESS.match(code)
        if label and classes:
            classes[-1][1] = label.group(1)
        impl = IMPL_TYPE.match(code)
        if impl and classes and classes[-1][1] != "private":
            findings.append(f"{rel}:{number}: {impl.group(2)} is declared {classes[-1][1]}")
        if CORE_ACCESSOR.search(code):
            findings.append(f"{rel}:{number}: a core() accessor in the public API")
        depth += code.count("{") - code.count("}")
        while classes and depth < classes[-1][0]:
            classes.pop()
    return findings


def main():
    root = pathlib.Path(
        subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True,
                       text=True).stdout.strip())
    headers = sorted((root / "include" / "bx").rglob("*.h"))
    findings = []
    for header in headers:
        findings += check(header, header.relative_to(root))
    for line in findings:
        print(line)
    print(f"{len(headers)} public headers, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
