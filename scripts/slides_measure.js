// Every text of a built deck as Chromium draws it at 1280×720: one line per text node,
// SLIDE<TAB>TAG<TAB>PX<TAB>TEXT (PX: its font size × the scale it is drawn at, on the 1280-wide
// slide), and SLIDE<TAB>cut<TAB>PX<TAB>TEXT for text below the slide's bottom edge.
// scripts/slides_check.py runs it; puppeteer-core comes with marp-cli (slides/node_modules).
//   node scripts/slides_measure.js NODE_MODULES CHROMIUM DECK.html
// Marp fits wide code to the slide once its observers have run, in frames: the page is measured
// in real time, once its fonts have loaded, until three readings in a row agree.
const [modules, chromium, html] = process.argv.slice(2);
const puppeteer = require(require.resolve("puppeteer-core", { paths: [modules] }));

function measure() {
  const out = [];
  document.querySelectorAll("section[id]").forEach((s) => {
    const box = s.getBoundingClientRect();
    const slide = box.width / 1280;
    if (!slide) return;
    const walk = document.createTreeWalker(s, NodeFilter.SHOW_TEXT);
    let n;
    while ((n = walk.nextNode())) {
      const text = n.textContent.trim().slice(0, 50).replace(/\s+/g, " ");
      const el = n.parentElement;
      if (!text || !el || !el.offsetWidth) continue;
      const r = document.createRange();
      r.selectNodeContents(n);
      if (!r.getClientRects().length) continue;
      const below = (r.getBoundingClientRect().bottom - box.bottom) / slide;
      if (below > 4) out.push(`${s.id}\tcut\t${below.toFixed(0)}\t${text}`);
      const scale = el.getBoundingClientRect().width / el.offsetWidth;
      const size = (parseFloat(getComputedStyle(el).fontSize) * scale) / slide;
      out.push(`${s.id}\t${el.tagName.toLowerCase()}\t${size.toFixed(2)}\t${text}`);
    }
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
    let last = null;
    for (let tries = 0, same = 0; tries < 40 && same < 3; tries++) {
      await new Promise((done) => setTimeout(done, 400));
      const now = await page.evaluate(measure);
      same = now === last ? same + 1 : 0;
      last = now;
    }
    process.stdout.write(last + "\n");
  } finally {
    await browser.close();
  }
})().catch((e) => {
  process.stderr.write(`[slides] ${html}: ${e.message}\n`);
  process.exit(1);
});
