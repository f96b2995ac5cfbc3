// Browser tests: inlet.js in real headless Chromium (Debian's chromium,
// driven by playwright-core) against a real `inlet serve`, reading back
// from Kafka with `inlet tail`.
//
// Needs: INLET_BIN, an inlet binary (default: built from the repo into a
// temp dir); chromium (scripts/chromium.sh installs it; CHROMIUM overrides
// the path); INLET_TEST_BROKERS for a real Kafka, else the gateway's
// development broker. Skipped when chromium is missing, unless
// INLET_TEST_REQUIRE_BROWSER=1.
//
// Every page reaches the gateway through a small proxy of the test's own,
// which records what the browser sent and answers 503 while told to.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, copyFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import http from "node:http";
import net from "node:net";
import { root } from "./helpers.mjs";

const chromiumPath = process.env.CHROMIUM || ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find(existsSync);
const skip = !chromiumPath && process.env.INLET_TEST_REQUIRE_BROWSER !== "1" ? "chromium is not installed (scripts/chromium.sh)" : false;
const results = join(root, "test-results");

let bin, tmp, gw, proxy, other, browser, brokers, topic;
const logs = [];

function freePort() {
  return new Promise((res) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => res(p));
    });
  });
}

async function waitFor(what, cond, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}\n--- gateway log ---\n${logs.join("").slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** startGateway runs inlet serve on a free port with args; it is killed at the end. */
async function startGateway(args) {
  const port = await freePort();
  const dir = mkdtempSync(join(tmp, "gw-"));
  const all = ["serve", "--listen", `127.0.0.1:${port}`, "--data-dir", dir, "--ack", "kafka", "--topic", topic, "--example", ...args];
  if (brokers) all.push("--brokers", brokers);
  else all.push("--broker-listen", `127.0.0.1:${await freePort()}`);
  const p = spawn(bin, all, { stdio: ["ignore", "pipe", "pipe"] });
  p.stdout.on("data", (d) => logs.push(d.toString()));
  p.stderr.on("data", (d) => logs.push(d.toString()));
  const url = `http://127.0.0.1:${port}`;
  await waitFor("the gateway to be ready", async () => {
    try {
      return (await fetch(url + "/readyz")).status === 200;
    } catch {
      return false;
    }
  });
  if (!brokers) brokers = all[all.indexOf("--broker-listen") + 1]; // the development broker
  return { url, proc: p };
}

/** startProxy forwards to target, recording each request to /v1/, and answers 503 (Retry-After: 1) to them while down. */
async function startProxy(target) {
  const px = { down: false, seen: [], url: "" };
  const t = new URL(target);
  const srv = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString();
      if (req.url.startsWith("/v1/")) {
        px.seen.push({ url: req.url, headers: req.headers, body, down: px.down });
        if (px.down) {
          res.writeHead(503, { "Retry-After": "1", "Content-Type": "application/json" });
          return res.end('{"error":"inlet is at capacity; retry later"}');
        }
      }
      const up = http.request({ host: t.hostname, port: t.port, path: req.url, method: req.method, headers: { ...req.headers, host: t.host } }, (r) => {
        res.writeHead(r.statusCode, r.headers);
        r.pipe(res);
      });
      up.on("error", () => res.destroy());
      up.end(body);
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  px.url = `http://127.0.0.1:${srv.address().port}`;
  px.close = () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); });
  return px;
}

/** staticServer serves the example page and inlet.js from another origin. */
async function staticServer() {
  const { readFileSync } = await import("node:fs");
  const srv = http.createServer((req, res) => {
    const path = req.url.split("?")[0];
    const file = path === "/sdk/inlet.js" ? join(root, "dist/inlet.js") : path === "/example/" ? join(root, "example/index.html") : null;
    if (!file) return res.writeHead(404).end();
    res.writeHead(200, { "Content-Type": file.endsWith(".js") ? "text/javascript" : "text/html" }).end(readFileSync(file));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${srv.address().port}`, close: () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }) };
}

/** consume reads every record of the topic (until 2 s without one). */
function consume(t = topic) {
  const out = execFileSync(bin, ["tail", "--brokers", brokers, "--topic", t, "--from", "beginning", "--idle", "2s"], { encoding: "utf8", timeout: 30000 });
  return out.split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

/** events waits until the topic holds records for all of ids, and returns them all. */
async function recordsFor(ids) {
  let recs = [];
  await waitFor(`records ${ids.join(", ")} in Kafka`, () => {
    recs = consume();
    const have = new Set(recs.map((r) => r.value.id));
    return ids.every((id) => have.has(id));
  }, 30000);
  return recs;
}

const sentIds = (px, name) => px.seen.flatMap((s) => { try { return JSON.parse(s.body); } catch { return []; } }).filter((e) => !name || e.event === name).map((e) => e.id);

before(async () => {
  if (skip) return;
  tmp = mkdtempSync(join(tmpdir(), "inlet-browser-"));
  mkdirSync(results, { recursive: true });
  bin = process.env.INLET_BIN;
  if (!bin) {
    bin = join(tmp, "inlet");
    execFileSync("go", ["build", "-o", bin, "./cmd/inlet"], { cwd: join(root, ".."), stdio: "inherit" });
  }
  brokers = process.env.INLET_TEST_BROKERS || "";
  topic = `browser-${Date.now()}-${Math.floor(Math.random() * 1e6)}`;
  other = await staticServer();
  gw = await startGateway(["--cors-origins", other.url]);
  proxy = await startProxy(gw.url);
  for (const path of ["/example/", "/ui/", "/sdk/inlet.js"]) {
    const r = await fetch(gw.url + path);
    if (r.status !== 200) throw new Error(`the gateway answers ${r.status} to GET ${path}: is gateway.Start calling startUI, and is --example a flag of inlet serve?`);
  }
  const { chromium } = await import("playwright-core");
  browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    // Playwright gives each launch a fresh profile directory (--user-data-dir).
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
  await proxy?.close();
  await other?.close();
  gw?.proc.kill("SIGTERM");
  if (gw) await new Promise((r) => gw.proc.once("exit", r));
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

async function shop(ctx, base = proxy.url, query = "") {
  const page = await ctx.newPage();
  page.on("console", (m) => m.type() === "error" && logs.push("console: " + m.text() + "\n"));
  await page.goto(`${base}/example/${query}`);
  await page.waitForFunction(() => window.inlet && window.inlet.anonymousId());
  return page;
}

test("the example page's views and clicks arrive in Kafka with their names, props, anonymous id and ids", { skip }, async () => {
  const ctx = await browser.newContext();
  const page = await shop(ctx);
  const anon = await page.evaluate(() => inlet.anonymousId());
  await page.click('[data-sku="ESP-250"] .add');
  await page.click('[data-sku="FLT-250"] .details');
  await page.click('[data-sku="FLT-250"] .add');
  await waitFor("the tracker's queue to empty", () => page.evaluate(() => inlet.queued() === 0));
  const mine = proxy.seen.flatMap((s) => JSON.parse(s.body)).filter((e) => e.anon_id === anon);
  assert.deepEqual(mine.map((e) => e.event), ["page_view", "add_to_cart", "click", "add_to_cart"]);
  const recs = await recordsFor(mine.map((e) => e.id));
  const byId = new Map(recs.map((r) => [r.value.id, r]));
  for (const e of mine) {
    const r = byId.get(e.id);
    assert.match(e.id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, "a UUIDv7");
    assert.equal(r.value.event, e.event);
    assert.equal(r.value.anon_id, anon);
    assert.equal(r.key, anon, "keyed by the anonymous id");
    assert.equal(r.headers["inlet-event-name"], e.event);
    assert.match(r.value.ua, /Chrome/);
  }
  const carts = mine.filter((e) => e.event === "add_to_cart").map((e) => byId.get(e.id).value.props);
  assert.deepEqual(carts, [
    { sku: "ESP-250", price: 9.5, currency: "EUR", quantity: 1 },
    { sku: "FLT-250", price: 11, currency: "EUR", quantity: 1 },
  ]);
  assert.equal(byId.get(mine[0].id).value.props.path, "/example/");
  assert.deepEqual((await ctx.cookies()).map((c) => c.name), [], "inlet.js sets no cookie");
  assert.ok(await page.evaluate(() => localStorage.getItem("inlet:anon_id")));
  await ctx.close();
});

test("a routes file sends inlet.js's events where a route says, with no change to the tracker", { skip }, async () => {
  const { writeFileSync } = await import("node:fs");
  const carts = `${topic}-carts`;
  const file = join(tmp, "routes.yaml");
  writeFileSync(file, `routes:\n  - {name: carts, match: {event: add_to_cart}, topic: ${carts}}\n`);
  const routed = await startGateway(["--routes", file]);
  try {
    const ctx = await browser.newContext();
    const page = await shop(ctx, routed.url);
    const anon = await page.evaluate(() => inlet.anonymousId());
    await page.click('[data-sku="ESP-250"] .add');
    await waitFor("the tracker's queue to empty", () => page.evaluate(() => inlet.queued() === 0));
    let cart;
    await waitFor(`the add_to_cart record in ${carts}`, () => {
      cart = consume(carts).find((r) => r.value.anon_id === anon);
      return cart;
    }, 30000);
    assert.equal(cart.value.event, "add_to_cart");
    assert.equal(cart.headers["inlet-route"], "carts");
    assert.equal(cart.headers["inlet-topic"], carts);
    let view;
    await waitFor(`the page_view record in ${topic}`, () => {
      view = consume().find((r) => r.value.anon_id === anon && r.value.event === "page_view");
      return view;
    }, 30000);
    assert.equal(view.headers["inlet-route"], undefined, "matched by no route: written as without a routes file");
    assert.ok(!consume().some((r) => r.value.anon_id === anon && r.value.event === "add_to_cart"), "the routed event is not also on --topic");
    await ctx.close();
  } finally {
    routed.proc.kill("SIGTERM");
    await new Promise((r) => routed.proc.once("exit", r));
  }
});

test("closing the tab right after a click still delivers it (sendBeacon)", { skip }, async () => {
  const ctx = await browser.newContext();
  // A long flush interval and a large flushAt: only the page going away sends.
  const page = await shop(ctx, proxy.url, "?flushAt=100&flushInterval=600000");
  const anon = await page.evaluate(() => inlet.anonymousId());
  await page.click('[data-sku="DEC-250"] .add');
  assert.equal(await page.evaluate(() => inlet.queued()), 2, "page_view and add_to_cart wait in the queue");
  await page.close({ runBeforeUnload: true });
  const seen = await waitFor("the beacon", () => proxy.seen.find((s) => s.body.includes(anon) && s.body.includes("DEC-250")));
  assert.match(seen.headers["content-type"], /^text\/plain/, "sendBeacon sends text/plain");
  const ids = JSON.parse(seen.body).map((e) => e.id);
  const recs = await recordsFor(ids);
  const cart = recs.find((r) => r.value.anon_id === anon && r.value.event === "add_to_cart");
  assert.equal(cart.value.props.sku, "DEC-250");
  await ctx.close();
});

test("during a 503 period events queue, survive a reload, and are delivered once after it", { skip }, async () => {
  const ctx = await browser.newContext();
  const page = await shop(ctx);
  const anon = await page.evaluate(() => inlet.anonymousId());
  await waitFor("the page view to be sent", () => page.evaluate(() => inlet.queued() === 0));
  proxy.down = true;
  try {
    await page.click('[data-sku="ESP-250"] .add');
    await page.click('[data-sku="DEC-250"] .add');
    await waitFor("a 503", () => proxy.seen.some((s) => s.down && s.body.includes(anon)));
    assert.equal(await page.evaluate(() => inlet.queued()), 2);
    await page.reload();
    await page.waitForFunction(() => window.inlet && window.inlet.anonymousId());
    // The reloaded page holds the two clicks and its own page view.
    assert.equal(await page.evaluate(() => inlet.queued()), 3, "the queue survived the reload");
    await new Promise((r) => setTimeout(r, 1500));
    assert.ok(await page.evaluate(() => inlet.queued()) >= 3, "nothing was dropped while refused");
  } finally {
    proxy.down = false;
  }
  await waitFor("the queue to drain after the outage", () => page.evaluate(() => inlet.queued() === 0), 20000);
  const ids = [...new Set(proxy.seen.filter((s) => !s.down && s.body.includes(anon)).flatMap((s) => JSON.parse(s.body).map((e) => e.id)))];
  assert.equal(ids.length, 4, "two page views and two clicks: " + ids.join(" "));
  await recordsFor(ids);
  await new Promise((r) => setTimeout(r, 1000));
  const mine = consume().filter((r) => r.value.anon_id === anon);
  const counts = {};
  for (const r of mine) counts[r.value.id] = (counts[r.value.id] || 0) + 1;
  assert.deepEqual(Object.values(counts).filter((n) => n > 1), [], "no id twice at the consumer");
  assert.deepEqual(mine.map((r) => r.value.event).sort(), ["add_to_cart", "add_to_cart", "page_view", "page_view"], "each event once");
  await ctx.close();
});

test("offline, then online: the events are delivered", { skip }, async () => {
  const ctx = await browser.newContext();
  const page = await shop(ctx);
  const anon = await page.evaluate(() => inlet.anonymousId());
  await waitFor("the page view to be sent", () => page.evaluate(() => inlet.queued() === 0));
  await ctx.setOffline(true);
  const before = proxy.seen.length;
  await page.click('[data-sku="FLT-250"] .add');
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(await page.evaluate(() => inlet.queued()), 1, "held while offline");
  assert.equal(proxy.seen.length, before, "nothing reached the gateway while offline");
  await ctx.setOffline(false);
  await waitFor("delivery once online", () => page.evaluate(() => inlet.queued() === 0), 10000);
  const id = proxy.seen.slice(before).flatMap((s) => JSON.parse(s.body)).find((e) => e.anon_id === anon && e.event === "add_to_cart").id;
  await recordsFor([id]);
  await ctx.close();
});

test("CORS: a page of an allowed origin sends; one of another origin cannot", { skip }, async () => {
  const ctx = await browser.newContext();
  // other.url is in --cors-origins; the same server by the name localhost is another origin.
  const ok = await shop(ctx, other.url, "?gw=" + encodeURIComponent(gw.url));
  await waitFor("the allowed origin's page view to be taken", () => ok.evaluate(() => inlet.queued() === 0));
  const okAnon = await ok.evaluate(() => inlet.anonymousId());
  const deniedBase = other.url.replace("127.0.0.1", "localhost");
  const bad = await shop(ctx, deniedBase, "?gw=" + encodeURIComponent(gw.url));
  const errors = [];
  bad.on("console", (m) => errors.push(m.text()));
  await bad.click('[data-sku="ESP-250"] .add');
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(await bad.evaluate(() => inlet.queued()), 2, "the browser refused the answer: the events stay queued");
  const badAnon = await bad.evaluate(() => inlet.anonymousId());
  const recs = consume();
  assert.ok(recs.some((r) => r.value.anon_id === okAnon && r.value.event === "page_view"), "the allowed origin's event arrived");
  // The gateway stores a simple request it cannot stop the browser from
  // sending; CORS keeps the answer from the page, which keeps its events.
  const res = await fetch(gw.url + "/v1/batch", { method: "OPTIONS", headers: { Origin: deniedBase, "Access-Control-Request-Method": "POST" } });
  assert.equal(res.status, 403);
  const res2 = await fetch(gw.url + "/v1/batch", { method: "OPTIONS", headers: { Origin: other.url, "Access-Control-Request-Method": "POST" } });
  assert.equal(res2.status, 204);
  assert.equal(res2.headers.get("access-control-allow-origin"), other.url);
  void badAnon;
  await ctx.close();
});

test("the live page shows a click within 1 s, with its JSON (screenshot in web/test-results/live.png)", { skip }, async () => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const live = await ctx.newPage();
  await live.goto(proxy.url + "/ui/");
  await live.waitForSelector("#st-ready.ok", { timeout: 10000 });
  const page = await shop(ctx);
  await waitFor("the page view on the live page", () => live.locator("#events li").count());
  for (const sku of ["ESP-250", "FLT-250", "DEC-250"]) {
    await page.click(`[data-sku="${sku}"] .details`);
  }
  const clicked = Date.now();
  await page.click('[data-sku="FLT-250"] .add');
  await live.locator("#events li", { hasText: "add_to_cart" }).first().waitFor({ timeout: 1000 });
  const took = Date.now() - clicked;
  assert.ok(took <= 1000, `shown after ${took} ms`);
  // An invalid event, for the rejected column.
  await fetch(proxy.url + "/v1/batch", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify([{ event: "signup", id: "ok-1", props: { plan: "pro" } }, { name: "no event field" }, { event: "", id: "x" }]) });
  await live.locator("#rejected li").nth(1).waitFor({ timeout: 5000 });
  await live.locator("#events li", { hasText: "add_to_cart" }).first().click();
  await live.locator("#events li .detail pre").first().waitFor();
  const detail = await live.locator("#events li .detail").first().textContent();
  assert.match(detail, /"sku": "FLT-250"/);
  assert.match(detail, /acknowledged by Kafka/);
  await live.waitForFunction(() => document.querySelectorAll("#counters .ctr svg").length >= 3);
  await new Promise((r) => setTimeout(r, 1100)); // one more stats tick, so the counters include the last events
  await live.screenshot({ path: join(results, "live.png") });
  if (process.env.INLET_UPDATE_SCREENSHOT === "1") copyFileSync(join(results, "live.png"), join(root, "docs/live.png"));
  await ctx.close();
});

/** contrast is the WCAG contrast ratio of two CSS rgb() colours. */
function contrast(a, b) {
  const lum = (c) => {
    const [r, g, bl] = c.match(/\d+(\.\d+)?/g).slice(0, 3).map((v) => {
      const s = Number(v) / 255;
      return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

test("the live page at 390 px wide: nothing wider than the screen, its link readable, its hints as served", { skip }, async () => {
  const ctx = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const live = await ctx.newPage();
  await live.goto(gw.url + "/ui/");
  await live.waitForSelector("#st-ready.ok", { timeout: 10000 });
  const m = await live.evaluate(() => ({
    width: document.documentElement.scrollWidth,
    cols: [...document.querySelectorAll("main .col")].map((c) => Math.round(c.getBoundingClientRect().width)),
    example: !document.getElementById("try-example").hidden, // the gateway runs with --example
    auth: !document.getElementById("send-auth").hidden,
    link: getComputedStyle(document.querySelector("#try-example a")).color,
    bg: getComputedStyle(document.body).backgroundColor,
  }));
  assert.ok(m.width <= 390, `the page is ${m.width} px wide at 390 px`);
  // One column: events, then rejections, each the screen's width (side by side they were 200 and 130 px).
  assert.ok(m.cols.every((w) => w >= 340), `columns ${m.cols.join(", ")} px wide at 390 px, want one column`);
  assert.ok(m.example && !m.auth, `example link shown ${m.example} (want true), credentials shown ${m.auth} (want false)`);
  const c = contrast(m.link, m.bg);
  assert.ok(c >= 4.5, `the link ${m.link} on ${m.bg}: contrast ${c.toFixed(2)}, want 4.5 at least (WCAG AA)`);
  await live.screenshot({ path: join(results, "live-390.png") });
  await ctx.close();
});
