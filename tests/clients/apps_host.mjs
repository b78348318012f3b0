// A minimal MCP Apps host: the official TypeScript SDK client talks to a real massgen-mcp
// server over stdio, the official ext-apps AppBridge plays the host side of the view protocol,
// and headless Chromium (driven by playwright-core) runs the view in a sandboxed iframe under a
// strict CSP, as hosts do. The network is blocked for the page.
//
// Usage: node apps_host.mjs <server-command> <models-json> <question> <screenshot.png>
// stdout: "running" once the live views show all three answers of the run in flight (the
// test then lets the votes through), then one line "result <json>". On the way, what the live
// view's boxes showed the first time one held a streamed draft ("drafting").
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { AppBridge } from "@modelcontextprotocol/ext-apps/app-bridge";
import { chromium } from "playwright-core";

const [command, modelsJson, question, screenshot] = process.argv.slice(2);
const CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'";
const HOST_PAGE = `<!doctype html><html><body style="margin:0">
<iframe id="live" sandbox="allow-scripts" style="width:1100px;height:1300px;border:0"></iframe>
<iframe id="progress" sandbox="allow-scripts" style="width:1100px;height:700px;border:0"></iframe>
<iframe id="summary" sandbox="allow-scripts" style="width:1100px;height:900px;border:0"></iframe>
<script>
for (const frame of document.querySelectorAll("iframe")) {
  window.addEventListener("message", (e) => {
    if (e.source === frame.contentWindow) window.toHost(frame.id, e.data);
  });
}
window.toView = (id, message) =>
  document.getElementById(id).contentWindow.postMessage(message, "*");
</script></body></html>`;

// The host's end of the postMessage channel, relayed through the page.
class FrameTransport {
  constructor(page, frameId) { this.page = page; this.frameId = frameId; this.seen = []; }
  async start() {}
  async send(message) { await this.page.evaluate(([id, m]) => window.toView(id, m), [this.frameId, message]); }
  async close() { this.onclose?.(); }
  deliver(message) {
    if (message.method) this.seen.push(message.method === "tools/call" ? `tools/call ${message.params.name}` : message.method);
    this.onmessage?.(message);
  }
}

const client = new Client({ name: "apps-host", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command, args: [], env: process.env, stderr: "ignore" }));
const { tools } = await client.listTools();
const viewUri = tools.find((t) => t.name === "get_result")._meta.ui.resourceUri;
const view = (await client.readResource({ uri: viewUri })).contents[0];
const viewHtml = view.text.replace("<head>", `<head><meta http-equiv="Content-Security-Policy" content="${CSP}">`);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
const page = await browser.newPage({ viewport: { width: 1100, height: 2200 }, colorScheme: "light" });
const blocked = [];
await page.route("**/*", (route) => { blocked.push(route.request().url()); return route.abort(); });
const problems = [];
page.on("console", (m) => { if (m.type() === "error") problems.push(m.text()); });
page.on("pageerror", (e) => problems.push(String(e)));
const transports = {};
await page.exposeFunction("toHost", (id, message) => transports[id].deliver(message));
await page.setContent(HOST_PAGE);

// Render get_result's view in one iframe: handshake, then tool input and result.
async function mount(frameId, mcpClient, capabilities, args, result) {
  const bridge = new AppBridge(mcpClient, { name: "apps-host", version: "1.0.0" }, capabilities,
                               { hostContext: { theme: "dark", displayMode: "inline" } });
  const transport = transports[frameId] = new FrameTransport(page, frameId);
  const ready = new Promise((resolve) => { bridge.oninitialized = resolve; });
  await bridge.connect(transport);
  await page.evaluate(([id, html]) => { document.getElementById(id).srcdoc = html; }, [frameId, viewHtml]);
  await ready;
  await bridge.sendToolInput({ arguments: args });
  await bridge.sendToolResult(result);
  return transport;
}

function inspect(frameId) {
  return page.frameLocator(`#${frameId}`).locator("html").evaluate(() => ({
    state: document.body.dataset.state,
    theme: document.documentElement.dataset.theme || null,
    background: getComputedStyle(document.body).backgroundColor,
    lanes: document.querySelectorAll("#view .lane").length,
    answers: document.querySelectorAll("#view details").length,
    votes: document.querySelectorAll("#view .ev.vote").length,
    status: document.querySelector("#status")?.textContent ?? null,
    winner: document.querySelector("#winner")?.textContent ?? null,
    finalAnswer: document.querySelector(".final-answer")?.textContent ?? null,
    scripts: document.querySelectorAll("#view script").length,
    handlers: document.querySelectorAll("#view [onerror], #view img").length,
    pwned: window.pwned === true,
    rows: [...document.querySelectorAll("#view tr")].slice(1)
      .map((row) => [...row.cells].map((cell) => cell.textContent)),
    text: document.getElementById("view").innerText,
  }));
}

// 1. Live: get_result right after the start has no result yet; the view follows the run
//    through get_status and shows the report, then the finished report. A second host that
//    proxies tools but not resources gets the progress table, then the summary.
const started = await client.callTool({ name: "run_consensus", arguments: { question, models: JSON.parse(modelsJson) } });
const sessionId = started.structuredContent.session_id;
const early = await client.callTool({ name: "get_result", arguments: { session_id: sessionId } });
const live = await mount("live", client, { serverTools: {}, serverResources: {} }, { session_id: sessionId }, early);
const toolsOnly = await mount("progress", client, { serverTools: {} }, { session_id: sessionId }, early);
// Taken in one go, inside the view, the moment a box shows part of an answer being written.
const liveFrame = await (await page.$("#live")).contentFrame();
const drafting = await (await liveFrame.waitForFunction(() => {
  const boxes = [...document.querySelectorAll("#live .agent-box")];
  const writing = boxes.filter((b) => b.classList.contains("writing")
                               && /\bw\d{3}\b/.test(b.querySelector(".draft").textContent));
  return writing.length === 0 ? null : {
    boxes: writing.map((b) => ({ agent: b.dataset.agent, text: b.querySelector(".draft").textContent,
                                 stats: b.querySelector(".stats").textContent })),
    answers: document.querySelectorAll("#view details").length,
    liveMarkup: document.querySelectorAll("#live script, #live img, #live textarea").length,
    pwned: window.pwned === true,
  };
}, null, { timeout: 60000, polling: 50 })).jsonValue();
// The test holds the votes, so all three answers can only appear through live updates.
await page.frameLocator("#live").locator('body[data-state="running"] #view details').nth(2)
  .waitFor({ timeout: 30000 });
await page.frameLocator("#progress").locator('body[data-state="running"] #view td:nth-child(4):text-is("1")').nth(2)
  .waitFor({ timeout: 30000 });
const during = await inspect("live");
const progress = await inspect("progress");
console.log("running");
await page.frameLocator("#live").locator('body[data-state="done"]').waitFor({ timeout: 60000 });
const after = await inspect("live");
await page.frameLocator("#progress").locator('body[data-state="done"]').waitFor({ timeout: 60000 });
const progressDone = await inspect("progress");

// 2. A host without server access: the view draws the summary from the result alone.
const finished = await client.callTool({ name: "get_result", arguments: { session_id: sessionId } });
const summaryView = await mount("summary", null, {}, { session_id: sessionId }, finished);
await page.frameLocator("#summary").locator('body[data-state="done"]').waitFor({ timeout: 30000 });
const summary = await inspect("summary");

await page.screenshot({ path: screenshot, fullPage: true });
await browser.close();
await client.close();
console.log("result " + JSON.stringify({
  viewUri, mimeType: view.mimeType, resourceMeta: view._meta ?? null, earlyIsError: early.isError === true,
  during, drafting, after, progress, progressDone, summary, liveRequests: live.seen, toolsOnlyRequests: toolsOnly.seen,
  summaryRequests: summaryView.seen, problems, blocked,
}));
