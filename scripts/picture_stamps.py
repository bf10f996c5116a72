#!/usr/bin/env python3
"""The README's pictures (docs/img) never older than what draws them: each picture NAME.png has a
stamp NAME.png.inputs beside it, one line per input with its hash. The script that draws the
picture writes the stamp; a test recomputes it and names the picture and the command that redraws
it where a line differs.

  dash  --build B --img D [--write] PLAN     docs/img/dash-*.png (scripts/screenshots.sh); PLAN has a
                                             line per picture: NAME.png<TAB>the options of scalelab-dash
  slides --root R --out O --img D [--write] DECK…
                                             docs/img/slides-NN.png (scripts/slides.sh's third
                                             argument): the slide each deck marks <!-- readme -->

A dashboard picture's inputs:
  command  the options of scalelab-dash that drew it
  run      what it shows: a live run's trace, from `scalelab train` with the run's options and
           --steps 3 (the same code and seed make the rest of the run), normalised: a sim run's
           slices are the same from run to run, but the order threads write events in, the flow
           ids and the times of the memory counters are not — events sorted, those left out
           (and Hogwild's losses, which race by design);
           a replayed trace (--replay F): its file
  code     viz/ and apps/scalelab-dash/ (all but *.md)
A slide picture's inputs:
  slide    the slide's text, expanded (excerpts and numbers put in)
  images   each picture it shows: an SVG's bytes; a dashboard PNG's sidecar (less its trace path),
           the run's normalised trace, the dashboard's code and scripts/slides.sh (the panel's
           options); a PNG without a sidecar, its bytes
  theme    slides/scalelab.css, slides/marp.config.js, slides/package-lock.json (Marp's version)
"""
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slides_check  # noqa: E402
import slides_deck  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASH_CODE = ("viz", "apps/scalelab-dash")
# Options of scalelab-dash alone (the picture, not the run): left out of the `scalelab train` that
# stands for a live run. The number is how many values each takes.
DASH_ONLY = {"--size": 1, "--step": 1, "--cursor-step": 1, "--at": 1, "--view": 1, "--font-size": 1, "--mouse": 1,
             "--panel": 1, "--live-for": 1, "--speed": 1, "--start": 0, "--memory-max": 1, "--only-devices": 1,
             "--only-lanes": 1, "--bench-frames": 1, "--bench-copies": 1}
RUN_STEPS = "3"
REDRAW = {"dash": "make screenshots (scripts/screenshots.sh)", "slides": "make slides-pictures (scripts/slides.sh … docs/img)"}


def sha(data):
    return hashlib.sha256(data).hexdigest()


def sha_file(path):
    with open(path, "rb") as fh:
        return sha(fh.read())


def sha_tree(root, dirs, skip_ext=(".md",)):
    h = hashlib.sha256()
    for d in dirs:
        for dirpath, dirnames, files in os.walk(os.path.join(root, d)):
            dirnames.sort()
            for f in sorted(files):
                if f.endswith(skip_ext):
                    continue
                p = os.path.join(dirpath, f)
                h.update(os.path.relpath(p, root).encode() + b"\0")
                with open(p, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def sha_trace(path):
    """A Chrome trace as the same run writes it every time: events sorted; flows (their ids and
    devices follow the threads' order) and the memory counters' times left out; and the metrics'
    values (losses, accuracy): OpenBLAS picks its kernels by the CPU, so their last bits move
    from machine to machine (and Hogwild's workers race on the weights by design)."""
    if path.endswith(".gz"):
        import gzip
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            j = json.load(fh)
    else:
        with open(path, encoding="utf-8") as fh:
            j = json.load(fh)
    events = []
    for e in j.get("traceEvents", []):
        if e.get("ph") in ("s", "f"):
            continue
        if e.get("ph") == "C":
            e = {k: v for k, v in e.items() if k != "ts"}
        events.append(json.dumps(e, sort_keys=True))
    rest = {k: v for k, v in j.items() if k != "traceEvents"}
    rest["scalelab_metrics"] = [{k: v for k, v in m.items() if k != "value"} for m in rest.get("scalelab_metrics", [])]
    return sha(("\n".join(sorted(events)) + "\n" + json.dumps(rest, sort_keys=True)).encode())


def run_options(dash_options):
    """The options of the live run a dashboard picture shows: the dashboard's, less its own."""
    words, out, i = shlex.split(dash_options), [], 0
    while i < len(words):
        w = words[i]
        opt = w.split("=", 1)[0]
        if opt in DASH_ONLY:
            i += 1 + (DASH_ONLY[opt] if "=" not in w else 0)
            continue
        out.append(w)
        i += 1
    return out


def with_steps(options, steps):
    out, i = [], 0
    while i < len(options):
        if options[i] == "--steps":
            i += 2
            continue
        out.append(options[i])
        i += 1
    return out + ["--steps", steps]


def dash_inputs(build, name, options, code):
    words = shlex.split(options)
    if "--replay" in words:
        trace = words[words.index("--replay") + 1]
        run = (sha_file(os.path.join(ROOT, trace)), f"the trace {trace}")
    else:
        train = [os.path.join(build, "scalelab"), "train"] + with_steps(run_options(options), RUN_STEPS) + ["--quiet"]
        with tempfile.TemporaryDirectory(prefix="scalelab-stamp-") as tmp:
            t = os.path.join(tmp, "run.trace.json")
            p = subprocess.run(train + ["--trace", t], capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"[pictures] {name}: `scalelab train {' '.join(train[2:])}` failed ({p.stderr.strip()[-300:]}) — "
                         "an option of scalelab-dash alone? add it to DASH_ONLY in scripts/picture_stamps.py")
            run = (sha_trace(t), "scalelab train " + " ".join(train[2:]) + " (normalised trace)")
    return [("command", sha(options.encode()), "scalelab-dash " + options),
            ("run", run[0], run[1]),
            ("code", code, " ".join(d + "/" for d in DASH_CODE) + " (all but *.md)")]


def png_inputs(out, rel, code, script):
    """A dashboard PNG shown on a slide, by what drew it (the PNG's bytes hang on the renderer)."""
    path = os.path.join(out, rel)
    side = path + ".json"
    if not os.path.exists(side):
        return sha_file(path)
    with open(side, encoding="utf-8") as fh:
        meta = json.load(fh)
    trace = meta.pop("trace", None)
    parts = [json.dumps(meta, sort_keys=True), code, script]
    if trace:
        tpath = trace if os.path.isabs(trace) else os.path.join(out, trace)
        if not os.path.exists(tpath):
            tpath = os.path.join(out, "data", os.path.basename(trace))
        parts.append(sha_trace(tpath))
    return sha("\n".join(parts).encode())


def slide_inputs(root, out, deck):
    name = os.path.basename(deck)
    k = slides_deck.readme_slide(deck)
    lines = slides_check.slides_of(os.path.join(out, name))[k - 1]
    text = "\n".join(lines)
    code = sha_tree(root, DASH_CODE)
    script = sha_file(os.path.join(root, "scripts", "slides.sh"))
    images = []
    for rel in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text):
        h = sha_file(os.path.join(out, rel)) if rel.endswith(".svg") else png_inputs(out, rel, code, script)
        images.append(f"{rel}={h}")
    theme = sha("".join(sha_file(os.path.join(root, "slides", f))
                        for f in ("scalelab.css", "marp.config.js", "package-lock.json")).encode())
    return f"slides-{name[:2]}.png", k, [
        ("slide", sha(text.encode()), f"slide {k} of {name}, expanded"),
        ("images", sha("\n".join(images).encode()), ", ".join(r.split("=")[0] for r in images) or "none"),
        ("theme", theme, "slides/scalelab.css, marp.config.js, package-lock.json")]


def stamp_text(picture, kind, lines):
    head = (f"# What drew {picture}: `{REDRAW[kind]}` redraws it and writes this file; the test\n"
            f"# (scripts/picture_stamps.py) recomputes each line and fails where one differs.\n")
    return head + "".join(f"{key} {h} {what}\n" for key, h, what in lines)


def read_stamp(path):
    got = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#") or not line.strip():
                continue
            key, h, *what = line.rstrip("\n").split(" ", 2)
            got[key] = (h, what[0] if what else "")
    return got


def settle(img, kind, pictures, write):
    """Write each stamp, or compare it; a difference names the picture, the input, the command."""
    stale = []
    for picture, lines in pictures:
        path = os.path.join(img, picture + ".inputs")
        if write:
            with open(path + ".tmp", "w", encoding="utf-8") as fh:
                fh.write(stamp_text(picture, kind, lines))
            os.replace(path + ".tmp", path)
            continue
        if not os.path.exists(os.path.join(img, picture)):
            stale.append(f"{img}/{picture} is missing — draw it: {REDRAW[kind]}")
            continue
        if not os.path.exists(path):
            stale.append(f"{img}/{picture} has no stamp {picture}.inputs — redraw it: {REDRAW[kind]}")
            continue
        got = read_stamp(path)
        for key, h, what in lines:
            if got.get(key, ("",))[0] != h:
                was = got.get(key, ("", "(none)"))[1]
                change = f"{what[:150]} changed" if was == what else f"now: {what[:150]}; stamped: {was[:150]}"
                stale.append(f"{img}/{picture} is older than what draws it: its {key} differs "
                             f"({change}) — redraw it: {REDRAW[kind]}")
    if stale:
        for s in stale:
            sys.stderr.write("[pictures] " + s + "\n")
        sys.exit(1)
    print(f"[pictures] {len(pictures)} {kind} pictures {'stamped' if write else 'as new as what draws them'}")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, rest = argv[1], argv[2:]
    opts, write = {}, False
    while rest and rest[0].startswith("--"):
        if rest[0] == "--write":
            write, rest = True, rest[1:]
            continue
        opts[rest[0][2:]] = rest[1]
        rest = rest[2:]
    if cmd == "dash":
        code = sha_tree(ROOT, DASH_CODE)
        with open(rest[0], encoding="utf-8") as fh:
            plan = [l.rstrip("\n").split("\t", 1) for l in fh if l.strip()]
        settle(opts["img"], "dash", [(n, dash_inputs(opts["build"], n, o, code)) for n, o in plan], write)
    elif cmd == "slides":
        pictures = []
        for deck in rest:
            picture, _, lines = slide_inputs(opts["root"], opts["out"], deck)
            pictures.append((picture, lines))
        settle(opts["img"], "slides", pictures, write)
    else:
        sys.exit(f"[pictures] '{cmd}': dash or slides")


if __name__ == "__main__":
    main(sys.argv)
