#!/usr/bin/env python3
"""Checks every relative link of the Markdown documentation: the file (or directory) exists
and, for `file.md#anchor`, the anchor is a heading of that file (GitHub's slugs).

Usage: scripts/check-links.py [FILE.md ...]  (default: README.md, docs/, chaos/ and benches/
Markdown files). Prints each broken link as `file:line: link (why)` and exits 1 if any.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# [text](target) and reference definitions `[id]: target`; code spans are removed first.
INLINE = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFDEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    found, seen, fenced = set(), {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path):
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for match in INLINE.finditer(line):
            yield number, match.group(1)
        ref = REFDEF.match(line)
        if ref:
            yield number, ref.group(1)


def check(path: Path) -> list:
    broken = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("<"):
            continue  # http:, https:, mailto: ...: not checked here
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where} (no such heading in {dest.relative_to(ROOT)})")
    return broken


def main() -> int:
    if len(sys.argv) > 1:
        files = [Path(a).resolve() for a in sys.argv[1:]]
    else:
        files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        for folder in ("chaos", "benches"):
            files += sorted((ROOT / folder).rglob("*.md"))
    broken = [b for f in files for b in check(f)]
    for line in broken:
        print(line)
    print(f"{len(files)} files checked, {len(broken)} broken links", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
