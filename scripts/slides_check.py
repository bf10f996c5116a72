#!/usr/bin/env python3
"""What a lecturer projecting the decks needs, checked on a build of them (tests/slides_test.sh).

  text-size --out O --theme CSS DECK…   every picture's text, as shown on a 1280×720 slide, is at
                                        least 18 px; and every font size the theme sets
  rendered --out O DECK…                (Chromium) every text of the built HTML, as the browser
                                        draws it (Marp's own scaling of code included), ≥ 18 px
                                        and inside the slide (none cut off at its bottom edge)
  clocks --out O DECK…                  the words "measured" / "simulated" on a slide, in a chart's
                                        text and in a table's labels agree with the clock of what
                                        they show
  try-it-names DECK…                    every `scalelab train` a deck gives to try names --model
                                        and --seed

O is the build's output (scripts/slides.sh OUT_DIR: the expanded decks, img/, data/); each DECK is
the source deck (slides/NN-*.md). Slides are numbered from 1 at the title slide, as Marp shows them.
Every finding names deck·slide, the picture or text, and the size or word; exit 1 if any.

Where a picture's numbers come from (slides/README.md, "What the test checks"):
  img/F.png   the dashboard's sidecar F.png.json (`scalelab-dash --screenshot` writes it):
              width, height, font_px (its text height in the PNG's pixels), clock
  img/F.svg   the SVG's own width/viewBox and each <text>'s font-size; its clock from the JSON it
              was drawn from, named in data/plots.txt (`img/F.svg data/X.json …`, scripts/slides.sh)
  {{RUN.x}}   data/RUN.json's time_kind
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slides_deck  # noqa: E402  (the deck's syntax: one parser for the build and the checks)

MIN_PX = 18.0
SLIDE_W, SLIDE_H = 1280, 720
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
RUN_REF = re.compile(r"\{\{([A-Za-z0-9_-]+)\.")
MEASURED = re.compile(r"\bmeasured\b", re.I)
SIMULATED = re.compile(r"\bsimulated\b|\(sim\)", re.I)
# Marp's directives are HTML comments too; every other comment is a presenter note.
DIRECTIVE = re.compile(r"^\s*_?(class|paginate|header|footer|backgroundColor|backgroundImage|color|theme|style|size|marp)\s*:")

findings = []


def finding(msg):
    findings.append(msg)


def done(what):
    if findings:
        for f in findings:
            sys.stderr.write("[slides] " + f + "\n")
        sys.stderr.write(f"[slides] {what}: {len(findings)} finding(s)\n")
        sys.exit(1)


# ---- decks --------------------------------------------------------------------------------------

def slides_of(path):
    """The slides of a deck as lists of lines, [0] the first (title) slide. A slide ends at a line
    '---' outside a fenced block; the front matter (between the first two '---') is dropped."""
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    slides, cur, rulers, fence = [], [], 0, False
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        if line.strip() == "---" and not fence:
            rulers += 1
            if rulers > 2:
                slides.append(cur)
                cur = []
            continue
        if rulers >= 2:
            cur.append(line)
    slides.append(cur)
    return slides


def deck_pair(out, deck):
    """(name, source slides, expanded slides) — the same slides, before and after expansion."""
    name = os.path.basename(deck)
    src, built = slides_of(deck), slides_of(os.path.join(out, name))
    if len(src) != len(built):
        sys.exit(f"[slides] {name}: {len(src)} slides in the source, {len(built)} in {out}/{name} — build it again")
    return name, src, built


def words(slide_lines):
    """The slide's text as shown or said: without fenced code and source captions, with notes."""
    text, fence = [], False
    for line in slide_lines:
        if line.startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith('<div class="source">'):
            continue
        text.append(line)
    joined = "\n".join(text)
    joined = re.sub(r"<!--(.*?)-->", lambda m: "" if DIRECTIVE.match(m.group(1)) else m.group(1), joined, flags=re.S)
    return IMAGE.sub("", joined)


# ---- pictures -----------------------------------------------------------------------------------

def png_size(path):
    with open(path, "rb") as fh:
        head = fh.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def svg_root(path):
    try:
        return ET.parse(path).getroot()
    except ET.ParseError as e:
        sys.exit(f"[slides] {path}: not an SVG the check can read ({e})")


def px(value):
    """A length in px ('12', '12px', '12.5'), or None for what the check cannot size (em, %)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(px)?\s*", value or "")
    return float(m.group(1)) if m else None


def svg_size(root):
    """(width in the SVG's user units, natural width in px, natural height in px)."""
    w, h = px(root.get("width")), px(root.get("height"))
    vb = root.get("viewBox")
    if vb:
        _, _, vw, vh = (float(v) for v in vb.replace(",", " ").split())
        return vw, w or vw, h or vh
    if w is None or h is None:
        sys.exit("[slides] an SVG without width/height in px or a viewBox: the check cannot size its text")
    return w, w, h


def svg_texts(root):
    """(text, font size in user units) of every <text> with words in it; font-size inherited from
    the enclosing elements' attributes or style, 16 (the browser's default) where none is set."""
    out = []

    def size_of(el, inherited):
        style = dict(kv.split(":", 1) for kv in (el.get("style") or "").split(";") if ":" in kv)
        s = px(style.get("font-size", "").strip()) if "font-size" in style else None
        return s or px(el.get("font-size")) or inherited

    def walk(el, inherited):
        size = size_of(el, inherited)
        if el.tag.rsplit("}", 1)[-1] == "text":
            words_in = "".join(el.itertext()).strip()
            if words_in:
                out.append((words_in, size))
            return
        for child in el:
            walk(child, size)

    walk(root, 16.0)
    return out


def css_rules(theme):
    """(selector, declarations) of each rule of a flat stylesheet (the theme has no nesting)."""
    with open(theme, encoding="utf-8") as fh:
        css = re.sub(r"/\*.*?\*/", "", fh.read(), flags=re.S)
    return [(sel.split(";")[-1].strip(), body) for sel, body in re.findall(r"([^{}]+)\{([^}]*)\}", css)]


def content_width(theme):
    """The slide's width less the section's left and right padding (the theme's `section` rule)."""
    for sel, body in css_rules(theme):
        if sel == "section":
            m = re.search(r"padding\s*:\s*([^;]+)", body)
            if m:
                parts = [px(p) for p in m.group(1).split()]
                left_right = parts[1] if len(parts) > 1 else parts[0]
                if left_right is not None:
                    return SLIDE_W - 2 * left_right
    return SLIDE_W


def shown_width(alt, natural_w, natural_h, content_w):
    """The width a picture is drawn at on a 1280×720 slide, from Marp's image keywords in ALT."""
    kw = alt.split()
    size = {}
    for k in kw:
        m = re.fullmatch(r"(w|width|h|height):([0-9.]+)(px)?", k)
        if m:
            size[m.group(1)[0]] = float(m.group(2))
    if "bg" in kw:
        split = next((float(m.group(1)) for k in kw for m in [re.fullmatch(r"(?:left|right):([0-9.]+)%", k)] if m), None)
        if split is None and ("left" in kw or "right" in kw):
            split = 50.0
        area_w = SLIDE_W * (split / 100 if split else 1)
        if "w" in size:
            w = size["w"]
        elif "h" in size:
            w = size["h"] * natural_w / natural_h
        elif "fit" in kw or "contain" in kw:
            w = natural_w * min(area_w / natural_w, SLIDE_H / natural_h)
        elif "auto" in kw:
            w = natural_w
        else:  # cover, Marp's default for a background
            w = natural_w * max(area_w / natural_w, SLIDE_H / natural_h)
        return min(w, area_w)
    if "w" in size:
        w = size["w"]
    elif "h" in size:
        w = size["h"] * natural_w / natural_h
    else:
        w = natural_w
    return min(w, content_w)  # the theme's img { max-width: 100% } of the content box


def picture(out, rel):
    """('png'|'svg', natural w, natural h, [(what, size in the picture's own units)], user-unit
    width, clock or None, problem or None)."""
    path = os.path.join(out, rel)
    if not os.path.exists(path):
        return None, 0, 0, [], 0, None, f"{rel} was not made"
    if rel.endswith(".svg"):
        root = svg_root(path)
        units_w, w, h = svg_size(root)
        return "svg", w, h, svg_texts(root), units_w, None, None
    size = png_size(path)
    if size is None:
        return None, 0, 0, [], 0, None, f"{rel}: not a PNG or SVG"
    side = path + ".json"
    if not os.path.exists(side):
        return "png", size[0], size[1], [], size[0], None, f"no {rel}.json: drawn by an old scalelab-dash (its --screenshot writes the sidecar)"
    with open(side, encoding="utf-8") as fh:
        meta = json.load(fh)
    missing = [k for k in ("panel", "width", "height", "font_px", "clock") if k not in meta]
    if missing:
        return "png", size[0], size[1], [], size[0], None, f"{rel}.json has no {', '.join(missing)}: drawn by another scalelab-dash"
    if (meta.get("width"), meta.get("height")) != tuple(size):
        return "png", size[0], size[1], [], size[0], None, f"{rel}.json says {meta.get('width')}×{meta.get('height')}, the PNG is {size[0]}×{size[1]}: the sidecar is not this picture's"
    return "png", size[0], size[1], [(f"the {meta['panel']} panel's text", float(meta["font_px"]))], size[0], meta["clock"], None


def text_size(out, theme, decks):
    content_w = content_width(theme)
    for deck in decks:
        name, _, built = deck_pair(out, deck)
        for k, slide in enumerate(built, 1):
            for alt, rel in IMAGE.findall("\n".join(slide)):
                kind, w, h, texts, units_w, _, problem = picture(out, rel)
                if problem:
                    finding(f"{name}·{k} {rel}: {problem}")
                    continue
                shown = shown_width(alt, w, h, content_w)
                if not texts:
                    continue
                what, size = min(texts, key=lambda t: t[1])  # the smallest names the picture's problem
                on_slide = size * shown / units_w
                if on_slide < MIN_PX - 0.05:
                    finding(f"{name}·{k} {rel}: '{what[:40]}' is {on_slide:.1f} px on the slide "
                            f"(font {size:g} × shown {shown:.0f} px / {units_w:g} wide) — needs ≥ {MIN_PX:g}")
    # The theme's own sizes: text the decks write (tables, code, captions) is drawn at these.
    for sel, body in css_rules(theme):
        for value in re.findall(r"font-size\s*:\s*([^;]+)", body):
            size = px(value)
            if size is not None and size < MIN_PX:
                finding(f"{os.path.basename(theme)}: '{sel}' sets font-size {size:g} px — needs ≥ {MIN_PX:g}")
    done("text size")
    print("[slides] text size: every picture's text and the theme's sizes ≥ 18 px on a 1280×720 slide")


# ---- as the browser draws it --------------------------------------------------------------------

def rendered(out, decks):
    """Chromium loads each built HTML (scripts/slides_measure.js, through the puppeteer-core that
    comes with marp-cli) and reports every text node's drawn size: its computed font-size × the
    scale Marp applied (e.g. to fit a long code line) ÷ the slide's own scale."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("[slides] rendered: chromium not found — apt-get install chromium")
    here = os.path.dirname(os.path.abspath(__file__))
    modules = os.path.join(os.path.dirname(here), "slides", "node_modules")
    for deck in decks:
        name = os.path.basename(deck)[:-3]
        html = os.path.abspath(os.path.join(out, name + ".html"))
        p = subprocess.run(["node", os.path.join(here, "slides_measure.js"), modules, chromium, html],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            finding(f"{name}: chromium could not measure it ({p.stderr.strip()[-300:]})")
            continue
        worst, cut = {}, {}
        for row in p.stdout.split("\n"):
            parts = row.split("\t")
            if len(parts) != 4:
                continue
            slide, tag, size, text = parts[0], parts[1], float(parts[2]), parts[3]
            if tag == "cut":
                cut.setdefault(slide, (size, text))
                continue
            if size < MIN_PX - 0.05 and (slide not in worst or size < worst[slide][0]):
                worst[slide] = (size, tag, text)
        for slide, (size, tag, text) in sorted(worst.items(), key=lambda s: int(s[0])):
            finding(f"{name}·{slide}: <{tag}> '{text}' is drawn at {size:.1f} px — needs ≥ {MIN_PX:g}")
        for slide, (below, text) in sorted(cut.items(), key=lambda s: int(s[0])):
            finding(f"{name}·{slide}: '{text}' is cut off, {below:.0f} px below the slide's bottom edge — the slide holds too much")
    done("rendered text")
    print("[slides] rendered text: every text of every slide ≥ 18 px at 1280×720, none cut off")


# ---- simulated or measured ----------------------------------------------------------------------

def clock_of_json(path):
    with open(path, encoding="utf-8") as fh:
        j = json.load(fh)
    if "time_kind" in j:
        return j["time_kind"]
    if "simulated" in j:
        return "simulated" if j["simulated"] else "measured"
    return None


def plot_sources(out):
    table = {}
    path = os.path.join(out, "data", "plots.txt")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if parts:
                    table[parts[0]] = parts[1:]
    return table


def clocks(out, decks):
    plots = plot_sources(out)
    run_clock = {}

    def of_run(run):
        if run not in run_clock:
            p = os.path.join(out, "data", run + ".json")
            run_clock[run] = clock_of_json(p) if os.path.exists(p) else None
        return run_clock[run]

    def of_picture(rel, where):
        if rel.endswith(".svg"):
            if rel not in plots:
                finding(f"{where} {rel}: no line in data/plots.txt names the JSON it was drawn from — add it in scripts/slides.sh")
                return None
            kinds = {clock_of_json(os.path.join(out, j)) for j in plots[rel]}
            return kinds.pop() if len(kinds) == 1 else "mixed"
        return picture(out, rel)[5]

    for deck in decks:
        name, src, built = deck_pair(out, deck)
        for k, (s_src, s_built) in enumerate(zip(src, built), 1):
            where = f"{name}·{k}"
            sources = {}  # what the slide shows → its clock
            for _, rel in IMAGE.findall("\n".join(s_built)):
                c = of_picture(rel, where)
                if c:
                    sources[rel] = c
                if rel.endswith(".svg") and c in ("simulated", "measured"):
                    legend = " ".join(t for t, _ in svg_texts(svg_root(os.path.join(out, rel))))
                    wrong = MEASURED if c == "simulated" else SIMULATED
                    m = wrong.search(legend)
                    if m:
                        finding(f"{where} {rel}: the chart says '{m.group(0)}' — it was drawn from {c} data ({', '.join(plots[rel])})")
            for run in sorted(set(RUN_REF.findall("\n".join(s_src)))):
                if of_run(run):
                    sources[f"data/{run}.json"] = of_run(run)
            kinds = set(sources.values())
            text = words(s_built)
            for clock, wrong in (("simulated", MEASURED), ("measured", SIMULATED)):
                m = wrong.search(text)
                if kinds == {clock} and m:
                    finding(f"{where}: the slide says '{m.group(0)}' about {clock} figures ({', '.join(sorted(sources))}) "
                            f"— line: {next(l for l in text.split(chr(10)) if wrong.search(l)).strip()[:80]}")
            table_labels(where, s_src, of_run)
    done("simulated/measured")
    print("[slides] simulated/measured: every slide, chart and table label agrees with its source's clock")


def table_labels(where, slide_lines, of_run):
    """A table's header cell or row label saying measured (simulated) must stand over (beside)
    numbers of measured (simulated) runs only; the top-left cell speaks for the whole table."""
    tables, cur = [], []
    for line in slide_lines:
        if line.strip().startswith("|"):
            cur.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif cur:
            tables.append(cur)
            cur = []
    if cur:
        tables.append(cur)
    for t in tables:
        if len(t) < 2:
            continue
        header, body = t[0], [r for r in t[1:] if not all(re.fullmatch(r":?-+:?", c) for c in r if c)]
        checks = []  # (label, cells it speaks for)
        for j, cell in enumerate(header):
            cells = [c for r in body for c in r] if j == 0 else [r[j] for r in body if j < len(r)]
            checks.append((cell, cells))
        for r in body:
            if r:
                checks.append((r[0], r[1:]))
        for label, cells in checks:
            runs = {run for c in cells for run in RUN_REF.findall(c)}
            for clock, word in (("measured", MEASURED), ("simulated", SIMULATED)):
                m = word.search(re.sub(r"\{\{[^}]*\}\}", "", label))
                if not m:
                    continue
                other = sorted(run for run in runs if of_run(run) and of_run(run) != clock)
                if other:
                    finding(f"{where}: the table's '{label}' says '{m.group(0)}' beside numbers of "
                            f"{', '.join(f'{r} ({of_run(r)})' for r in other)}")


# ---- try it -------------------------------------------------------------------------------------

def try_it_names(decks):
    """Each `scalelab train` a deck gives names its model and seed: the student's run is the deck's."""
    for deck in decks:
        name = os.path.basename(deck)
        for info, lines, _ in slides_deck.code_blocks(deck):
            if info.split()[1:2] != ["try-it"]:
                continue
            for command in "\n".join(lines).replace("\\\n", " ").split("\n"):
                command = re.sub(r"\s+", " ", command).strip()
                if re.search(r"(^|[\s/;&|])scalelab train\b", command):
                    missing = [o for o in ("--model", "--seed") if not re.search(r"\s" + o + r"[ =]", command)]
                    if missing:
                        finding(f"{name}: '{command}' does not name {' and '.join(missing)}")
    done("try it")
    print("[slides] try it: every `scalelab train` names --model and --seed")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("check", choices=("text-size", "rendered", "clocks", "try-it-names"))
    p.add_argument("--out", help="the build's output (scripts/slides.sh OUT_DIR)")
    p.add_argument("--theme", help="the theme's CSS (slides/scalelab.css)")
    p.add_argument("decks", nargs="+", metavar="DECK")
    a = p.parse_args()
    if a.check != "try-it-names" and not a.out:
        p.error(f"{a.check} needs --out")
    if a.check == "text-size":
        if not a.theme:
            p.error("text-size needs --theme")
        text_size(a.out, a.theme, a.decks)
    elif a.check == "rendered":
        rendered(a.out, a.decks)
    elif a.check == "clocks":
        clocks(a.out, a.decks)
    else:
        try_it_names(a.decks)


if __name__ == "__main__":
    main()
