// The live page of a running session in headless Chromium (driven by playwright-core), as a
// person watching it: the page follows its event stream, and this script reports what the
// page shows mid-run and after the run, with anything the page's CSP refused.
//
// Usage: node live_page.mjs <page-url> <screenshot.png> [min-chars]
// stdout: "ready" once the page is loaded (and follows its event stream), "mid <json>" once
// at least two agents' boxes show min-chars (40) of streamed text
// (the screenshot is taken then), then "end <json>" once the page has reloaded into the final
// report.
import { chromium } from "playwright-core";

const [url, screenshot, minChars = "40"] = process.argv.slice(2);
const origin = new URL(url).origin;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
const page = await browser.newPage({ viewport: { width: 1200, height: 900 }, colorScheme: "light" });
const elsewhere = [];
await page.route("**/*", (route) => {
  if (route.request().url().startsWith(origin)) return route.continue();
  elsewhere.push(route.request().url());
  return route.abort();
});
const problems = [];
page.on("console", (m) => { if (m.type() === "error") problems.push(m.text()); });
page.on("pageerror", (e) => problems.push(String(e)));
let loads = 0;
page.on("load", () => { loads += 1; });

function inspect() {
  return page.evaluate(() => ({
    live: document.getElementById("live") !== null,
    status: document.getElementById("status")?.textContent ?? null,
    boxes: [...document.querySelectorAll(".agent-box")].map((box) => ({
      agent: box.dataset.agent,
      writing: box.classList.contains("writing"),
      phase: box.querySelector(".phase").textContent,
      stats: box.querySelector(".stats").textContent,
      text: box.querySelector(".draft").textContent,
    })),
    notes: [...document.querySelectorAll("#notes li")].map((li) => li.textContent),
    answers: document.querySelectorAll("#report details").length,
    liveMarkup: document.querySelectorAll("#live script, #live img, #live textarea").length,
    scripts: document.querySelectorAll("script").length,
    pwned: window.pwned === true,
    winner: document.getElementById("winner")?.textContent ?? null,
  }));
}

await page.goto(url);
console.log("ready");
await page.waitForFunction((least) => [...document.querySelectorAll(".agent-box.writing .draft")]
  .filter((d) => d.textContent.length >= least).length >= 2, Number(minChars), { timeout: 90000 });
const mid = await inspect();
await page.screenshot({ path: screenshot });
console.log("mid " + JSON.stringify(mid));
await page.locator("#live").waitFor({ state: "detached", timeout: 120000 });
await page.locator("#status").waitFor({ timeout: 30000 });
const end = await inspect();
await browser.close();
console.log("end " + JSON.stringify({ ...end, loads, problems, elsewhere }));
