// Unit tests of the tracker's queue, batching and retry (sdk/core.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { loadCore, fakeEnv, settle } from "./helpers.mjs";

const core = await loadCore();
const GW = "http://gw.test";

function started(opts = {}, envOpts = {}) {
  const f = fakeEnv(envOpts);
  const t = core.createInlet(f.env);
  t.init({ url: GW, flushAt: 3, flushInterval: 1000, ...opts });
  return { t, ...f };
}

test("uuidv7 has version 7, the variant bits, and the time first", () => {
  const a = core.uuidv7(1_700_000_000_000, new Uint8Array(16).fill(255));
  assert.match(a, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(parseInt(a.replace(/-/g, "").slice(0, 12), 16), 1_700_000_000_000);
  const b = core.uuidv7(1_700_000_000_001, new Uint8Array(16));
  assert.ok(a < b, "ids sort by time");
});

test("events are batched: sent at flushAt, or after flushInterval", async () => {
  const { t, sent, advance } = started();
  t.track("a", { n: 1 });
  t.track("b");
  await settle();
  assert.equal(sent.length, 0);
  t.track("c");
  await settle();
  assert.equal(sent.length, 1);
  assert.deepEqual(sent[0].batch.map((e) => e.event), ["a", "b", "c"]);
  assert.equal(sent[0].url, GW + "/v1/batch");
  assert.equal(sent[0].init.keepalive, true);
  assert.equal(sent[0].init.headers["Content-Type"], "text/plain");
  assert.deepEqual(sent[0].batch[0].props, { n: 1 });
  assert.equal(t.queued(), 0);
  t.track("d");
  await advance(999);
  assert.equal(sent.length, 1);
  await advance(1);
  assert.equal(sent.length, 2);
});

test("every event carries its id, the anonymous id, the time and, once identified, the user", async () => {
  const { t, sent } = started({ flushAt: 2 });
  t.identify("u-42");
  const id1 = t.track("a");
  const id2 = t.track("b");
  await settle();
  const [a, b] = sent[0].batch;
  assert.equal(a.id, id1);
  assert.equal(b.id, id2);
  assert.notEqual(id1, id2);
  assert.equal(a.anon_id, t.anonymousId());
  assert.match(a.anon_id, /^[0-9a-f-]{36}$/);
  assert.equal(a.uid, "u-42");
  assert.equal(typeof a.ts, "number");
});

test("the anonymous id and the user survive a reload; no cookie is set unless asked", async () => {
  const storage = new Map();
  const cookies = [];
  const f1 = fakeEnv({ storage });
  f1.env.cookie = { get: () => "", set: (c) => cookies.push(c) };
  const t1 = core.createInlet(f1.env);
  t1.init({ url: GW });
  t1.identify("u1");
  const f2 = fakeEnv({ storage });
  const t2 = core.createInlet(f2.env);
  t2.init({ url: GW });
  assert.equal(t2.anonymousId(), t1.anonymousId());
  assert.deepEqual(cookies, []);

  const f3 = fakeEnv();
  let jar = "";
  f3.env.cookie = { get: () => jar, set: (c) => cookies.push((jar = c.split(";")[0])) };
  const t3 = core.createInlet(f3.env);
  t3.init({ url: GW, cookie: { maxAgeDays: 30 } });
  assert.equal(cookies.length, 1);
  assert.match(cookies[0], /^inlet_anon_id=/);
  assert.equal(f3.storage.has("inlet:anon_id"), false);
  const t4 = core.createInlet(f3.env);
  t4.init({ url: GW, cookie: true });
  assert.equal(t4.anonymousId(), t3.anonymousId());
});

test("503 with Retry-After: the batch is kept and sent again no sooner than asked, then once", async () => {
  let down = true;
  const { t, sent, advance } = started({ flushAt: 1 }, { respond: () => (down ? { status: 503, retryAfter: 7 } : { status: 200 }) });
  const id = t.track("a");
  await settle();
  assert.equal(sent.length, 1);
  assert.equal(t.queued(), 1);
  await advance(6900);
  assert.equal(sent.length, 1, "retried before Retry-After");
  t.track("b"); // flushAt reached again, but the gateway asked to wait
  await settle();
  assert.equal(sent.length, 1, "a new event must not bypass Retry-After");
  down = false;
  await advance(200);
  assert.equal(sent.length, 2);
  assert.deepEqual(sent[1].batch.map((e) => e.id), [id, sent[1].batch[1].id]);
  assert.equal(t.queued(), 0);
  await advance(60_000);
  assert.equal(sent.length, 2, "sent again after it was taken");
});

test("429 and network errors back off exponentially", async () => {
  let answer = new TypeError("Failed to fetch");
  const { t, sent, advance } = started({ flushAt: 1 }, { respond: () => answer });
  t.track("a");
  await settle();
  const at = [];
  for (let i = 0; i < 5; i++) {
    const n = sent.length;
    let waited = 0;
    while (sent.length === n) {
      await advance(100);
      waited += 100;
    }
    at.push(waited);
  }
  // 1 s, 2 s, 4 s, 8 s, 16 s, each ±25%
  [1000, 2000, 4000, 8000, 16000].forEach((base, i) => assert.ok(at[i] >= base * 0.75 && at[i] <= base * 1.25 + 100, `retry ${i} after ${at[i]} ms`));
  answer = { status: 429 };
  await advance(40_000);
  assert.ok(t.queued() === 1);
  answer = { status: 200 };
  await advance(70_000);
  assert.equal(t.queued(), 0);
});

test("400 is never retried: the batch is dropped", async () => {
  const { t, sent, advance } = started({ flushAt: 1 }, { respond: () => ({ status: 400 }) });
  t.track("a");
  await settle();
  assert.equal(sent.length, 1);
  assert.equal(t.queued(), 0);
  await advance(120_000);
  assert.equal(sent.length, 1);
});

test("the queue is bounded by maxQueue: the oldest events go", async () => {
  const { t } = started({ flushAt: 1000, maxQueue: 5 }, { respond: () => ({ status: 503 }) });
  const ids = [];
  for (let i = 0; i < 8; i++) ids.push(t.track("e" + i));
  assert.equal(t.queued(), 5);
});

test("the queue survives a reload and is sent by the next page", async () => {
  const storage = new Map();
  const f1 = fakeEnv({ storage, respond: () => ({ status: 503, retryAfter: 1 }) });
  const t1 = core.createInlet(f1.env);
  t1.init({ url: GW, flushAt: 1 });
  const id = t1.track("before-reload");
  await settle();
  assert.equal(t1.queued(), 1);
  const f2 = fakeEnv({ storage });
  const t2 = core.createInlet(f2.env);
  t2.init({ url: GW });
  await f2.advance(0);
  assert.equal(f2.sent.length, 1);
  assert.equal(f2.sent[0].batch[0].id, id);
  assert.equal(t2.queued(), 0);
});

test("events tracked before init are sent after it", async () => {
  const f = fakeEnv();
  const t = core.createInlet(f.env);
  t.track("early");
  t.init({ url: GW, flushAt: 1 });
  await settle();
  assert.equal(f.sent[0].batch[0].event, "early");
  assert.equal(f.sent[0].batch[0].anon_id, t.anonymousId());
});

test("hiding the page beacons the queue while healthy, and keeps it stored during an outage", async () => {
  let down = false;
  const { t, beacons, sent } = started({ flushAt: 100 }, { respond: () => (down ? { status: 503 } : { status: 200 }) });
  t.track("a");
  t._hide();
  assert.equal(beacons.length, 1);
  assert.equal(beacons[0].url, GW + "/v1/batch");
  assert.equal(t.queued(), 0);
  down = true;
  t.track("b");
  await t.flush();
  assert.equal(sent.length, 1);
  t._hide();
  assert.equal(beacons.length, 1, "beaconed during an outage");
  assert.equal(t.queued(), 1);
});

test("a refused beacon leaves the events queued", () => {
  const { t } = started({ flushAt: 100 }, { beacon: () => false });
  t.track("a");
  t._hide();
  assert.equal(t.queued(), 1);
});

test("without fetch the pixel carries each event as base64url JSON", async () => {
  const { t, pixels } = started({ flushAt: 1, writeKey: "k 1" }, { fetch: false });
  t.track("pix", { "é": "ü/+" });
  await settle();
  assert.equal(pixels.length, 1);
  const u = new URL(pixels[0]);
  assert.equal(u.pathname, "/i");
  assert.equal(u.searchParams.get("write_key"), "k 1");
  const data = u.searchParams.get("data");
  assert.doesNotMatch(data, /[+/=]/);
  const e = JSON.parse(Buffer.from(data, "base64url").toString("utf8"));
  assert.equal(e.event, "pix");
  assert.deepEqual(e.props, { "é": "ü/+" });
});

test("large queues are cut into bodies under 60 kB (the keepalive and beacon limit)", async () => {
  const { t, sent } = started({ flushAt: 1000 });
  for (let i = 0; i < 300; i++) t.track("big", { pad: "x".repeat(500) });
  await t.flush();
  assert.ok(sent.length >= 3);
  for (const s of sent) assert.ok(JSON.stringify(s.batch).length < 60_000);
  assert.equal(sent.reduce((n, s) => n + s.batch.length, 0), 300);
});
