#!/usr/bin/env python3
"""The docs stand alone: every link in README.md and docs/*.md either is a public web reference
(http:// or https://) or names a file inside this repository that exists, and a #section it names
exists in that page. Prints each bad link as file:line: link (why) and exits 1 if there is one.

Usage: check_links.py REPO_ROOT
"""
import os
import re
import sys

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|\!\[[^\]]*\]\(([^)\s]+)\)")
# Paths written as code or prose that point outside the tree: a checkout's sibling folder or an
# absolute path on the machine that wrote the page.
OUTSIDE = re.compile(r"(\.\./shared/|/work/|file://)")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found = set()
        in_code = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("```"):
                    in_code = not in_code
                elif not in_code and line.startswith("#"):
                    found.add(slug(line.lstrip("#")))
        cache[path] = found
    return cache[path]


def check(root):
    root = os.path.realpath(root)
    pages = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    pages += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    bad = []
    for page in pages:
        rel_page = os.path.relpath(page, root)
        in_code = False
        with open(page, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.startswith("```"):
                    in_code = not in_code
                    continue
                where = f"{rel_page}:{number}"
                if OUTSIDE.search(line):
                    bad.append(f"{where}: {OUTSIDE.search(line).group(0)} (a path outside the repository)")
                if in_code:
                    continue
                for m in LINK.finditer(line):
                    target = m.group(1) or m.group(2)
                    if target.startswith(("http://", "https://")):
                        continue
                    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                        bad.append(f"{where}: {target} (only http(s) links may leave the repository)")
                        continue
                    file_part, _, anchor = target.partition("#")
                    resolved = os.path.realpath(os.path.join(os.path.dirname(page), file_part)) if file_part else page
                    if os.path.commonpath([root, resolved]) != root:
                        bad.append(f"{where}: {target} (leaves the repository)")
                    elif not os.path.exists(resolved):
                        bad.append(f"{where}: {target} (no such file)")
                    elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                        bad.append(f"{where}: {target} (no section #{anchor} in {os.path.relpath(resolved, root)})")
    return pages, bad


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    pages, bad = check(sys.argv[1])
    for line in bad:
        print(line)
    if bad:
        print(f"docs: {len(bad)} bad link(s) in {len(pages)} page(s)")
        return 1
    print(f"docs: every link in {len(pages)} page(s) stays in the repository or is a public URL")
    return 0


if __name__ == "__main__":
    sys.exit(main())
