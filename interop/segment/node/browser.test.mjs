// The Segment spec's browser library, @segment/analytics-next from npm,
// unmodified, in headless Chromium (driven by playwright-core, as web/test
// does) against a real `inlet serve --auth --ack kafka`: a page on another
// origin loads it with its API host set to inlet (the "Segment.io"
// integration's apiHost and protocol, given as cdnSettings so nothing is
// fetched from Segment's CDN) and calls page, track, identify, group and
// alias; each message must be in Kafka once, with the messageId the
// library gave it. A wrong write key is refused: the library reports the
// delivery failure.
//
// Needs INLET_BIN, INLET_TEST_BROKERS and CHROMIUM (scripts/segment-interop.sh
// sets them); skipped without CHROMIUM unless INLET_TEST_SEGMENT_SDKS=1.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import http from "node:http";
import net from "node:net";
import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const required = process.env.INLET_TEST_SEGMENT_SDKS === "1";
const skip = !process.env.CHROMIUM && !required ? "CHROMIUM is not set (scripts/segment-interop.sh sets it)" : false;

let tmp, gw, site, browser, key, topic;
const bin = process.env.INLET_BIN;
const brokers = process.env.INLET_TEST_BROKERS;
const logs = [];

const freePort = () =>
  new Promise((res) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => res(p));
    });
  });

async function waitFor(what, cond, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}\n--- inlet's log ---\n${logs.join("").slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** consume reads every record of the topic (until 2 s without one), as inlet tail prints them. */
const consume = () =>
  execFileSync(bin, ["tail", "--brokers", brokers, "--topic", topic, "--from", "beginning", "--idle", "2s"], { encoding: "utf8", timeout: 30000 })
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));

before(async () => {
  if (skip) return;
  assert.ok(bin && brokers && process.env.CHROMIUM, "INLET_BIN, INLET_TEST_BROKERS and CHROMIUM must be set");
  tmp = mkdtempSync(join(tmpdir(), "inlet-segment-browser-"));
  topic = `segment-browser-${Date.now()}`;
  const clients = join(tmp, "clients.json");
  key = execFileSync(bin, ["clients", "add", "--file", clients, "web"], { encoding: "utf8" }).trim();

  // The library, bundled as it comes from npm; the page is served from an
  // origin of its own, allowed by --cors-origins.
  const lib = await build({
    stdin: { contents: `import { AnalyticsBrowser } from "@segment/analytics-next"; window.AnalyticsBrowser = AnalyticsBrowser;`, resolveDir: here },
    bundle: true, format: "iife", platform: "browser", write: false, logLevel: "error",
  });
  const page = `<!doctype html><meta charset="utf-8"><title>shop</title><script src="/analytics.js"></script><p>shop</p>`;
  site = http.createServer((req, res) => {
    if (req.url === "/analytics.js") return res.writeHead(200, { "Content-Type": "text/javascript" }).end(lib.outputFiles[0].text);
    res.writeHead(200, { "Content-Type": "text/html" }).end(page);
  });
  await new Promise((r) => site.listen(0, "127.0.0.1", r));
  const origin = `http://127.0.0.1:${site.address().port}`;

  const port = await freePort();
  const args = ["serve", "--listen", `127.0.0.1:${port}`, "--brokers", brokers, "--topic", topic, "--data-dir", join(tmp, "data"),
    "--ack", "kafka", "--clients", clients, "--auth", "--cors-origins", origin];
  const proc = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
  proc.stdout.on("data", (d) => logs.push(d.toString()));
  proc.stderr.on("data", (d) => logs.push(d.toString()));
  gw = { proc, host: `127.0.0.1:${port}`, origin };
  await waitFor("inlet to be ready", async () => {
    try {
      return (await fetch(`http://${gw.host}/readyz`)).status === 200;
    } catch {
      return false;
    }
  });
  const { chromium } = await import("playwright-core");
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
  site?.closeAllConnections();
  site?.close();
  gw?.proc.kill("SIGTERM");
  if (gw) await new Promise((r) => gw.proc.once("exit", r));
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** shop opens the page, loads analytics-next with writeKey and inlet as its API host, and runs calls in it. */
async function shop(writeKey) {
  const page = await browser.newPage();
  const requests = [];
  page.on("console", (m) => logs.push(`console ${m.type()}: ${m.text()}\n`));
  page.on("request", (r) => r.url().includes(gw.host) && requests.push(`${r.method()} ${r.url()}`));
  page.on("response", (r) => r.url().includes(gw.host) && requests.push(`${r.status()} ${r.url()}`));
  page.on("requestfailed", (r) => r.url().includes(gw.host) && requests.push(`failed ${r.url()}: ${r.failure()?.errorText}`));
  await page.goto(gw.origin + "/");
  const out = await page.evaluate(
    async ({ writeKey, host }) => {
      const errors = [];
      const [analytics] = await window.AnalyticsBrowser.load({
        writeKey,
        cdnSettings: { integrations: { "Segment.io": { apiKey: writeKey, apiHost: `${host}/v1`, protocol: "http" } } },
      });
      analytics.on("error", (e) => errors.push(`${e.code}: ${e.reason}`));
      const ctxs = [
        await analytics.page("Docs", "Install", { path: "/docs/install" }),
        await analytics.track("Order Completed", { order_id: "o1", revenue: 12.5 }),
        await analytics.identify("u-browser", { plan: "pro" }),
        await analytics.group("g-browser", { name: "Acme" }),
        await analytics.alias("u-browser-2", "u-browser"),
      ];
      return {
        errors,
        sent: ctxs.map((c) => ({ messageId: c.event.messageId, type: c.event.type, event: c.event.event, name: c.event.name, failed: c.failedDelivery()?.reason?.toString() })),
      };
    },
    { writeKey, host: gw.host },
  );
  await page.close();
  return { ...out, requests };
}

test("analytics-next in Chromium: page, track, identify, group and alias land in Kafka once, with their messageIds", { skip }, async () => {
  const got = await shop(key);
  const why = JSON.stringify(got, null, 1) + "\n--- inlet's log ---\n" + logs.join("").slice(-4000);
  assert.deepEqual(got.errors, [], why);
  assert.deepEqual(got.sent.filter((s) => s.failed), [], why);
  const ids = got.sent.map((s) => s.messageId);
  let recs = [];
  await waitFor(`the ${ids.length} messages in Kafka`, () => {
    recs = consume();
    return ids.every((id) => recs.some((r) => r.value.messageId === id));
  });
  for (const s of got.sent) {
    const mine = recs.filter((r) => r.value.messageId === s.messageId);
    assert.equal(mine.length, 1, `${s.type} ${s.messageId}: ${mine.length} records`);
    const v = mine[0].value;
    assert.equal(v.type, s.type, JSON.stringify(v));
    if (s.event) assert.equal(v.event, s.event);
    if (s.name) assert.equal(v.name, s.name);
  }
  const track = recs.find((r) => r.value.type === "track").value;
  assert.deepEqual(track.properties, { order_id: "o1", revenue: 12.5 });
  assert.equal(track.context.library.name, "analytics.js", "the library names itself in context.library");
  console.log(`analytics-next: ${ids.length} messages in Kafka; requests: ${got.requests.join(", ")}`);
});

test("analytics-next with a wrong write key: refused, the library reports the delivery failure", { skip }, async () => {
  const got = await shop("not-" + key);
  const why = JSON.stringify(got, null, 1);
  assert.ok(got.requests.some((r) => r.startsWith("401 ")), `no 401 from inlet: ${why}`);
  assert.ok(got.sent.every((s) => /401|NonRetryable/i.test(s.failed ?? "")) || got.errors.length > 0, `the library reported no failure: ${why}`);
  const recs = consume();
  assert.equal(recs.filter((r) => got.sent.some((s) => s.messageId === r.value.messageId)).length, 0, "nothing of the wrong key in Kafka");
});
