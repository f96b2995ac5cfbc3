// Shared helpers of the Node tests: the tracker's core built from source,
// and a fake Env with a manual clock.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

export const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** loadCore builds sdk/core.ts and imports it. */
export async function loadCore() {
  const r = await build({ entryPoints: [join(root, "sdk/core.ts")], bundle: true, format: "esm", write: false });
  return import("data:text/javascript;base64," + Buffer.from(r.outputFiles[0].text).toString("base64"));
}

/** fakeEnv is an Env whose clock and timers the test moves, and whose
 * fetch answers with respond(batch, url) → {status, retryAfter?} or throws. */
export function fakeEnv({ respond = () => ({ status: 200 }), storage = new Map(), beacon, fetch = true } = {}) {
  let now = 1_700_000_000_000;
  let seq = 0;
  const timers = new Map();
  const sent = []; // batches given to fetch
  const beacons = [];
  const pixels = [];
  const env = {
    now: () => now,
    random: (n) => Uint8Array.from({ length: n }, () => (seq = (seq * 1103515245 + 12345) & 0x7fffffff) & 255),
    storage: {
      getItem: (k) => (storage.has(k) ? storage.get(k) : null),
      setItem: (k, v) => storage.set(k, String(v)),
      removeItem: (k) => storage.delete(k),
    },
    fetch: fetch
      ? async (url, init) => {
          const batch = JSON.parse(init.body);
          sent.push({ url, batch, init });
          const a = respond(batch, url);
          if (a instanceof Error) throw a;
          return { status: a.status, headers: { get: (k) => (k === "Retry-After" && a.retryAfter != null ? String(a.retryAfter) : null) } };
        }
      : undefined,
    beacon: beacon === undefined ? (url, body) => (beacons.push({ url, batch: JSON.parse(body) }), true) : beacon,
    pixel: (url) => pixels.push(url),
    setTimeout: (f, ms) => {
      const id = ++seq;
      timers.set(id, { f, at: now + ms });
      return id;
    },
    clearTimeout: (id) => timers.delete(id),
    online: () => true,
  };
  /** advance moves the clock by ms, running the timers due, and lets their promises settle. */
  async function advance(ms) {
    const end = now + ms;
    for (;;) {
      let next = null;
      for (const [id, t] of timers) if (t.at <= end && (!next || t.at < next[1].at)) next = [id, t];
      if (!next) break;
      timers.delete(next[0]);
      now = Math.max(now, next[1].at);
      next[1].f();
      await settle();
    }
    now = end;
    await settle();
  }
  return { env, sent, beacons, pixels, storage, advance, timers };
}

export const settle = () => new Promise((r) => setImmediate(r));
