#!/usr/bin/env python3
"""The decks' build-time parts (scripts/slides.sh, tests/slides_test.sh).

  expand --root R --data D --out O DECK…   write each deck to O/ with its excerpts and numbers put in
  markers --root R DECK…                   check every excerpt a deck names exists (error otherwise)
  try-it DECK…                             the "try it" commands, one a line: DECK<TAB>COMMAND
  images DECK…                             the pictures a deck shows, one a line: DECK<TAB>PATH
  readme-slide DECK                        the number of the slide marked <!-- readme --> (the
                                           README's picture of the deck)

In a deck (slides/NN-topic.md):
  <!-- excerpt: NAME -->       the lines between `// slide: NAME` and `// end slide` in strategies/ or
                               run/ (C++), or between `# slide: NAME` and `# end slide` in
                               examples/pytorch/ (Python), as a code block with the file and line
                               numbers under it
  <!-- beside -->              the excerpts named up to <!-- end beside --> in two columns: those
  <!-- excerpt: … -->          from examples/pytorch/ on the left under "PyTorch", scalelab's on the
  <!-- end beside -->          right (the lecture's PyTorch calls beside ours)
  {{RUN.FIELD|FORMAT}}         a number from a run's JSON (the build's data/RUN.json); FIELD is a
                               dotted path (rows.0.bubble_pct), FORMAT a Python format spec, MiB or GiB (a number of GiB)
                               (bytes) or pct (a fraction); ms_per_step is time_s/steps in ms,
                               bubble_formula (p−1)/(m+p−1) of the run's devices and micro-batches
  ```bash try-it               commands the test runs (each must exit 0); an HTML comment
                               <!-- test-with: --steps 5 --> before the block sets the values the test gives the
                               options its commands have
"""
import html
import json
import os
import re
import sys

# Where excerpts come from: folder, file endings, the comment that opens a marker, the language.
SOURCES = (
    ("strategies", (".cpp", ".h"), "//", "cpp"),
    ("run", (".cpp", ".h"), "//", "cpp"),
    ("examples/pytorch", (".py",), "#", "python"),
)
EXCERPT = re.compile(r"^<!-- excerpt: ([A-Za-z0-9_-]+) -->\s*$")
NUMBER = re.compile(r"\{\{([A-Za-z0-9_-]+)\.([A-Za-z0-9_.]+)(?:\|([^}]+))?\}\}")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
TEST_WITH = re.compile(r"^<!-- test-with: (.*?) -->\s*$")
BESIDE, END_BESIDE = "<!-- beside -->", "<!-- end beside -->"


def fail(msg):
    sys.stderr.write("[slides] " + msg + "\n")
    sys.exit(1)


def find_excerpt(root, name, deck):
    """(relative path, first line number, lines, language) of the marked region NAME."""
    found = []
    for folder, endings, comment, language in SOURCES:
        start, end_mark = f"{comment} slide: {name}", f"{comment} end slide"
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if not f.endswith(endings):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    lines = fh.read().split("\n")
                for i, line in enumerate(lines):
                    if line.strip() == start:
                        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == end_mark), None)
                        if end is None:
                            fail(f"{os.path.relpath(path, root)}:{i + 1}: '{start}' has no '{end_mark}' after it — add one")
                        found.append((os.path.relpath(path, root), i + 2, lines[i + 1:end], language))
    if not found:
        where = ", ".join(f"'{c} slide: {name}' in {d}/" for d, _, c, _ in SOURCES)
        fail(f"{os.path.basename(deck)}: excerpt '{name}' — no {where}"
             " — mark the lines in the source, or fix the name in the deck")
    if len(found) > 1:
        fail(f"{os.path.basename(deck)}: excerpt '{name}' is marked {len(found)} times ({', '.join(f[0] for f in found)}) — keep one")
    return found[0]


def excerpt_code(root, name, deck):
    """(relative path, first line, code without its common indent, language) of excerpt NAME."""
    path, first, lines, language = find_excerpt(root, name, deck)
    indent = min((len(l) - len(l.lstrip()) for l in lines if l.strip()), default=0)
    return path, first, "\n".join(l[indent:] for l in lines), len(lines), language


def source_line(path, first, count):
    return f"<div class=\"source\">{path}, lines {first}–{first + count - 1}</div>\n"


def excerpt_block(root, name, deck):
    path, first, code, count, language = excerpt_code(root, name, deck)
    return f"```{language}\n{code}\n```\n" + source_line(path, first, count)


def beside_block(root, names, deck):
    """A <!-- beside --> block: the PyTorch excerpts in the left column, scalelab's in the right,
    each headed by whose code it is. The code is HTML, not a Markdown block: Marp shrinks a
    Markdown block until its longest line fits, and half a slide would leave the type too small
    to read; these wrap their long lines instead (slides/scalelab.css). A <pre> starts after a
    blank line so that Markdown keeps it whole, blank lines and all."""
    columns = {"PyTorch": [], "scalelab": []}
    for name in names:
        path, first, code, count, _ = excerpt_code(root, name, deck)
        who = "PyTorch" if path.startswith("examples/pytorch/") else "scalelab"
        columns[who].append(f"\n<pre><code>{html.escape(code, quote=False)}</code></pre>\n" + source_line(path, first, count))
    out = ["<div class=\"beside\">"]
    for who, blocks in columns.items():
        if not blocks:
            fail(f"{os.path.basename(deck)}: a <!-- beside --> block with no {who} excerpt ({', '.join(names)}) — "
                 "it shows the lecture's PyTorch code beside scalelab's: name one of each")
        out.append(f"<div>\n<div class=\"who\">{who}</div>\n" + "".join(blocks) + "</div>")
    return "\n".join(out) + "\n</div>\n"


def number(data_dir, run, field, fmt, deck, cache):
    if run not in cache:
        path = os.path.join(data_dir, run + ".json")
        if not os.path.exists(path):
            fail(f"{os.path.basename(deck)}: {{{{{run}.{field}}}}} — the build made no run '{run}' ({path}) — add it to scripts/slides.sh")
        with open(path, encoding="utf-8") as fh:
            cache[run] = json.load(fh)
    v = cache[run]
    if field == "ms_per_step":
        v = 1e3 * v["time_s"] / v["steps"]
    elif field == "bubble_formula":  # (p−1)/(m+p−1) of the run's stages (devices) and micro-batches
        p, m = v["devices"], v.get("micro_batches", 1)
        v = (p - 1) / (m + p - 1)
    else:
        for part in field.split("."):
            try:
                v = v[int(part)] if isinstance(v, list) else v[part]
            except (KeyError, IndexError, ValueError, TypeError):
                fail(f"{os.path.basename(deck)}: {{{{{run}.{field}}}}} — data/{run}.json has no '{field}'")
    if fmt == "MiB":
        return f"{v / 2**20:.2f} MiB"
    if fmt == "GiB":  # the number alone: a table says "GiB" once, in its header
        return f"{v / 2**30:,.1f}"
    if fmt == "pct":
        return f"{100 * v:.1f}%"
    return format(v, fmt or "")


def expand(root, data_dir, out_dir, decks):
    for deck in decks:
        with open(deck, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
        cache = {}
        out = []
        rulers = 0
        beside, names = None, []  # the line of an open <!-- beside -->, the excerpts it names
        for k, line in enumerate(lines):
            rulers += line.strip() == "---"
            # Markdown reads text followed by '---' as a heading: the slide break would vanish.
            # (The front matter's closing '---' follows its last line: it is the second ruler.)
            if line.strip() == "---" and rulers > 2 and lines[k - 1].strip():
                fail(f"{os.path.basename(deck)}:{k + 1}: '---' right after text is a heading, not a new slide — put a blank line before it")
            if line.strip() in (BESIDE, END_BESIDE):
                if line.strip() == BESIDE and beside is not None:
                    fail(f"{os.path.basename(deck)}:{k + 1}: <!-- beside --> inside the <!-- beside --> of line {beside + 1}"
                         " — close that one first with <!-- end beside -->")
                if line.strip() == END_BESIDE and beside is None:
                    fail(f"{os.path.basename(deck)}:{k + 1}: <!-- end beside --> with no <!-- beside --> before it — remove it,"
                         " or open the block")
                if line.strip() == BESIDE:
                    beside, names = k, []
                else:
                    out.append(beside_block(root, names, deck))
                    beside = None
                continue
            m = EXCERPT.match(line)
            if m and beside is not None:
                names.append(m.group(1))
                continue
            if m:
                out.append(excerpt_block(root, m.group(1), deck))
                continue
            if beside is not None:
                if line.strip():
                    fail(f"{os.path.basename(deck)}:{k + 1}: only excerpts go between <!-- beside --> and <!-- end beside --> — move '{line.strip()}' out")
                continue
            if TEST_WITH.match(line) or line.strip() == "<!-- readme -->":
                continue  # for the build and the test: Marp would show them as presenter notes
            out.append(NUMBER.sub(lambda n: number(data_dir, n.group(1), n.group(2), n.group(3), deck, cache), line))
        if beside is not None:
            fail(f"{os.path.basename(deck)}:{beside + 1}: <!-- beside --> has no <!-- end beside --> after it — add one")
        target = os.path.join(out_dir, os.path.basename(deck))
        with open(target + ".tmp", "w", encoding="utf-8") as fh:
            fh.write("\n".join(out))
        os.replace(target + ".tmp", target)


def code_blocks(deck):
    """(info, lines, test-with options) of every fenced block."""
    with open(deck, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    blocks, i, test_with = [], 0, None
    while i < len(lines):
        m = TEST_WITH.match(lines[i])
        if m:
            test_with = m.group(1)
        elif lines[i].startswith("```") and lines[i].strip() != "```":
            info = lines[i][3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            blocks.append((info, lines[i + 1:j], test_with))
            test_with = None
            i = j
        i += 1
    return blocks


def with_options(command, options):
    """`command` with each `--opt value` of `options` replacing its value there (a command
    without that option is left as it is: not every command takes --steps)."""
    words = options.split()
    for k in range(0, len(words), 2):
        opt, val = words[k], words[k + 1]
        pattern = re.compile(r"(\s" + re.escape(opt) + r"[ =])\S+")
        command = pattern.sub(lambda m: m.group(1) + val, command)
    return command


def try_it(decks):
    for deck in decks:
        n = 0
        for info, lines, test_with in code_blocks(deck):
            if info.split()[1:2] != ["try-it"]:
                continue
            joined = "\n".join(lines).replace("\\\n", " ")
            for command in joined.split("\n"):
                command = re.sub(r"\s+", " ", command).strip()
                if not command or command.startswith("#"):
                    continue
                print(f"{os.path.basename(deck)}\t{with_options(command, test_with) if test_with else command}")
                n += 1
        if n == 0:
            fail(f"{os.path.basename(deck)}: no ```bash try-it block — every deck gives the students commands to try")


def readme_slide(deck):
    """Slides are separated by lines '---' after the front matter (itself between two '---')."""
    with open(deck, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    rulers, slide = 0, 1
    for line in lines:
        if line.strip() == "---":
            rulers += 1
            if rulers > 2:
                slide += 1
        elif line.strip() == "<!-- readme -->":
            return slide
    fail(f"{os.path.basename(deck)}: no slide marked <!-- readme --> (the one the README shows)")


def main(argv):
    if len(argv) < 2:
        fail(__doc__)
    cmd, rest = argv[1], argv[2:]
    opts = {}
    while rest and rest[0].startswith("--"):
        opts[rest[0][2:]] = rest[1]
        rest = rest[2:]
    if not rest:
        fail(f"{cmd}: no deck given")
    if cmd == "expand":
        expand(opts["root"], opts["data"], opts["out"], rest)
    elif cmd == "markers":
        for deck in rest:
            with open(deck, encoding="utf-8") as fh:
                for line in fh:
                    m = EXCERPT.match(line)
                    if m:
                        find_excerpt(opts["root"], m.group(1), deck)
    elif cmd == "try-it":
        try_it(rest)
    elif cmd == "images":
        for deck in rest:
            with open(deck, encoding="utf-8") as fh:
                for path in IMAGE.findall(fh.read()):
                    print(f"{os.path.basename(deck)}\t{path}")
    elif cmd == "readme-slide":
        print(readme_slide(rest[0]))
    else:
        fail(f"'{cmd}': expand, markers, try-it, images or readme-slide")


if __name__ == "__main__":
    main(sys.argv)
