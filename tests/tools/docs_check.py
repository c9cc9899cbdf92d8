#!/usr/bin/env python3
"""What a reader of README.md, docs/ and examples/ follows must work (issue 35):

- every relative link resolves to a file of the repository, and its #anchor (if any) to a heading
  or an <a id="..."> of that file;
- every `fairseq-cpp-*` command shown in a fenced code block parses: the built program runs it
  with --dump-config added (the arguments are checked, the config resolved, nothing is read or
  trained). Where a preset's task.data placeholder stands, task.data is supplied; where the docs
  show CONFIG.yaml, a shipped preset stands in (DOCS_CHECK_VERBOSE=1 lists the commands).

    docs_check.py SOURCE_DIR BUILD_DIR

Prints one line per problem (file:line, what, why) and exits 1 when there is any.
"""
import os
import re
import shlex
import subprocess
import sys

PROGRAMS = ("train", "preprocess", "generate", "interactive", "eval", "score")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
FENCE = re.compile(r"^\s*(```|~~~)")
# Shell words that end a program's arguments: pipes, redirections, command separators.
SHELL_STOP = re.compile(r"^(\||\|\||&&|;|&|[0-9]*>>?.*|<.*|[0-9]*>&[0-9]+)$")


def markdown_files(source):
    files = [os.path.join(source, "README.md")]
    for top in ("docs", "examples"):
        for directory, subdirectories, names in os.walk(os.path.join(source, top)):
            subdirectories.sort()
            files += [os.path.join(directory, n) for n in sorted(names) if n.endswith(".md")]
    return files


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(path, cache={}):
    if path not in cache:
        found, counts, in_fence = set(), {}, False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    in_fence = not in_fence
                    continue
                found.update(EXPLICIT_ANCHOR.findall(line))
                m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m and not in_fence:
                    base = slug(m.group(1))
                    n = counts.get(base, 0)
                    counts[base] = n + 1
                    found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks, inline code spans removed."""
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            if not in_fence:
                yield number, re.sub(r"`[^`]*`", "", line)


def check_links(source, path, problems):
    where = os.path.relpath(path, source)
    for number, line in prose_lines(path):
        for target in LINK.findall(line) + IMAGE.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            resolved = path if not file_part else os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            if not os.path.exists(resolved):
                problems.append(f"{where}:{number}: link `{target}`: {os.path.relpath(resolved, source)} does not exist")
            elif anchor and resolved.endswith(".md") and anchor not in anchors_of(resolved):
                problems.append(f"{where}:{number}: link `{target}`: no heading or <a id> `{anchor}` in "
                                f"{os.path.relpath(resolved, source)}")


def shown_commands(path):
    """(line number, words) of each fairseq-cpp-* command in the file's fenced code blocks, its
    continuation lines joined, environment assignments before it and shell plumbing after it left out."""
    in_fence, pending, start = False, "", 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                in_fence, pending = not in_fence, ""
                continue
            if not in_fence:
                continue
            text = line.rstrip("\n")
            if not pending:
                start = number
            if text.rstrip().endswith("\\"):
                pending += text.rstrip()[:-1] + " "
                continue
            text, pending = pending + text, ""
            words = command_words(text)
            if words:
                yield start, words


def command_words(text):
    text = re.sub(r"^\s*\$\s+", "", text)  # a shell prompt
    text = re.sub(r"\s#.*$", "", text)  # a trailing comment
    try:
        words = shlex.split(text)
    except ValueError:
        return None
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):  # VAR=value before the program
        words = words[1:]
    if not words:
        return None
    program = os.path.basename(words[0])
    if not program.startswith("fairseq-cpp-") or program[len("fairseq-cpp-"):] not in PROGRAMS:
        return None
    args = []
    for w in words[1:]:
        if SHELL_STOP.match(w):
            break
        args.append(w)
    return [program] + args


# Placeholders that the docs show for a file of the reader's own, and what stands in for them here.
STAND_INS = {"CONFIG.yaml": "configs/demo.yaml"}


def run(build, words, extra):
    argv = [os.path.join(build, words[0])] + [STAND_INS.get(w, w) for w in words[1:]] + extra + ["--dump-config"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def check_commands(source, build, path, problems):
    where = os.path.relpath(path, source)
    count = 0
    for number, words in shown_commands(path):
        if "--help" in words or "-h" in words:
            continue
        count += 1
        if os.environ.get("DOCS_CHECK_VERBOSE"):
            print(f"{where}:{number}: {' '.join(words)}")
        r = run(build, words, [])
        if r.returncode != 0 and "is the preset's placeholder" in r.stderr:
            r = run(build, words, ["task.data=data-bin/supplied-by-docs-check"])
        if r.returncode != 0:
            error = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
            problems.append(f"{where}:{number}: `{' '.join(words)}` does not parse (exit {r.returncode}): {error}")
    return count


def main():
    source, build = sys.argv[1], sys.argv[2]
    os.chdir(source)  # commands name configs/... relative to the repository root
    problems, files, commands = [], 0, 0
    for path in markdown_files(source):
        files += 1
        check_links(source, path, problems)
        commands += check_commands(source, build, path, problems)
    for p in problems:
        print(p)
    print(f"docs_check: {files} files, {commands} commands, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
