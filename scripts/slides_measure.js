// Every text of a built deck as Chromium draws it at 1280×720: one line per text node,
// SLIDE<TAB>TAG<TAB>PX<TAB>TEXT (PX: its font size × the scale Marp fits it to, on the 1280-wide
// slide), and SLIDE<TAB>cut<TAB>PX<TAB>TEXT where PX of it are cut off at the slide's bottom (and top).
// scripts/slides_check.py runs it; puppeteer-core comes with marp-cli (slides/node_modules).
//   node scripts/slides_measure.js NODE_MODULES CHROMIUM DECK.html
const [modules, chromium, html] = process.argv.slice(2);
const puppeteer = require(require.resolve("puppeteer-core", { paths: [modules] }));

// Marp fits a wide code block to the slide with a script (marp-pre → marp-auto-scaling, in shadow
// roots) whose observers race the fonts; the scale it aims at is the room over the block's natural
// width, at most 1, and that is what is used here: the same every time.
function fit(el) {
  const host = el.closest("marp-pre, [is=marp-pre]");
  const scaler = host && host.shadowRoot && host.shadowRoot.querySelector("marp-auto-scaling");
  const root = scaler && scaler.shadowRoot;
  if (!root) return { scale: 1 };
  const room = root.querySelector("[data-marp-auto-scaling-wrapper]");
  const natural = root.querySelector("[data-marp-auto-scaling-container]");
  const scale = Math.min(1, room.offsetWidth / natural.offsetWidth);
  return { scale, host, height: natural.offsetHeight * scale + (host.offsetHeight - room.offsetHeight) };
}

function measure() {
  const out = [];
  document.querySelectorAll("section[id]").forEach((s) => {
    const walk = document.createTreeWalker(s, NodeFilter.SHOW_TEXT);
    let n;
    while ((n = walk.nextNode())) {
      const text = n.textContent.trim().slice(0, 50).replace(/\s+/g, " ");
      const el = n.parentElement;
      if (!text || !el || !el.offsetWidth) continue;
      const size = parseFloat(getComputedStyle(el).fontSize) * fit(el).scale;
      out.push(`${s.id}\t${el.tagName.toLowerCase()}\t${size.toFixed(2)}\t${text}`);
    }
    // What the slide holds, from the layout (a code block at its fitted height): its blocks stand
    // in a column, centred; past the padding, what does not fit is cut at the top and the bottom.
    let total = 0;
    let last = "";
    for (const child of s.children) {
      const cs = getComputedStyle(child);
      if (cs.position === "absolute" || cs.position === "fixed" || cs.display === "none") continue;
      const pre = child.matches("marp-pre, [is=marp-pre]") ? fit(child.querySelector("code") || child) : null;
      total += (pre && pre.host ? pre.height : child.offsetHeight) + parseFloat(cs.marginTop) + parseFloat(cs.marginBottom);
      last = child.textContent.trim().slice(0, 50).replace(/\s+/g, " ") || last;
    }
    // The blocks may use the padding too (the theme keeps it small), not past the slide's edge.
    const ss = getComputedStyle(s);
    const room = s.clientHeight - (parseFloat(ss.paddingTop) + parseFloat(ss.paddingBottom)) / 2;
    const over = (total - room) / 2;
    if (over > 2) out.push(`${s.id}\tcut\t${over.toFixed(0)}\t${last}`);
  });
  return out.join("\n");
}

(async () => {
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--hide-scrollbars"],
  });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 720 });
    await page.goto("file://" + html, { waitUntil: "load", timeout: 120000 });
    await page.evaluate(() => document.fonts.ready);
    await page.addScriptTag({ content: `${fit}\n${measure}` });
    const last = await page.evaluate(() => measure());
    process.stdout.write(last + "\n");
  } finally {
    await browser.close();
  }
})().catch((e) => {
  process.stderr.write(`[slides] ${html}: ${e.message}\n`);
  process.exit(1);
});
