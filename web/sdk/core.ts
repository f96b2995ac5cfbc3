// The tracker's logic, with everything it needs from the browser passed in
// (Env), so that the queue, batching and retry run the same in Node's test
// runner as in a page. index.ts binds it to window.

/** Options of inlet.init. */
export interface InitOptions {
  /** The gateway's base URL, e.g. "https://t.example.com"; events go to <url>/v1/batch. */
  url: string;
  /** Sent as ?write_key= with every request, when set. */
  writeKey?: string;
  /** Send once this many events are queued (default 20). */
  flushAt?: number;
  /** Send queued events at least this often, in ms (default 5000). */
  flushInterval?: number;
  /** Events kept while they cannot be sent; past it the oldest are dropped (default 1000). */
  maxQueue?: number;
  /** Keep the anonymous id in a first-party cookie instead of localStorage (default false: no cookie is set). */
  cookie?: boolean | { domain?: string; maxAgeDays?: number };
}

/** Props of an event: any JSON object. */
export type Props = Record<string, unknown>;

/** One event as sent to the gateway. */
export interface WireEvent {
  event: string;
  id: string;
  ts: number;
  anon_id: string;
  uid?: string;
  props?: Props;
  context?: Props;
}

/** The tracker's API (window.inlet). */
export interface Inlet {
  /** Configures the tracker; calls before it are queued. */
  init(o: InitOptions): void;
  /** Queues an event; returns its id. */
  track(name: string, props?: Props): string;
  /** Queues a "page_view" event with the page's url, path, title and referrer. */
  page(props?: Props): string;
  /** Sets the user id sent with later events ("" clears it). */
  identify(uid: string): void;
  /** Sends what is queued now; resolves when the attempt is over. */
  flush(): Promise<void>;
  /** The anonymous id of this browser. */
  anonymousId(): string;
  /** Events queued and not yet acknowledged. */
  queued(): number;
}

/** What the tracker needs from its host (a browser, or a test). */
export interface Env {
  now(): number;
  random(n: number): Uint8Array;
  storage?: { getItem(k: string): string | null; setItem(k: string, v: string): void; removeItem(k: string): void };
  fetch?: (url: string, init: { method: string; body: string; keepalive: boolean; headers: Record<string, string>; credentials: string }) => Promise<{ status: number; headers: { get(k: string): string | null } }>;
  beacon?: (url: string, body: string) => boolean;
  pixel?: (url: string) => void;
  setTimeout(f: () => void, ms: number): unknown;
  clearTimeout(t: unknown): void;
  online?(): boolean;
  cookie?: { get(): string; set(c: string): void };
  location?: { href: string; pathname: string; title: string; referrer: string };
}

const QUEUE = "inlet:queue";
const ANON = "inlet:anon_id";
const UID = "inlet:uid";
// keepalive and beacon bodies are limited to 64 KiB in all in flight.
const MAX_BODY = 60000;
const MAX_BACKOFF = 60000;

const hex = (b: Uint8Array, i: number, j: number): string => {
  let s = "";
  for (; i < j; i++) s += (b[i] | 256).toString(16).slice(1);
  return s;
};

/** uuidv7 is an RFC 9562 version 7 UUID: 48 bits of ms time, then random. */
export function uuidv7(now: number, rnd: Uint8Array): string {
  const b = rnd.slice(0, 16);
  for (let i = 5; i >= 0; i--) {
    b[i] = now % 256;
    now = Math.floor(now / 256);
  }
  b[6] = (b[6] & 15) | 0x70;
  b[8] = (b[8] & 63) | 0x80;
  return hex(b, 0, 4) + "-" + hex(b, 4, 6) + "-" + hex(b, 6, 8) + "-" + hex(b, 8, 10) + "-" + hex(b, 10, 16);
}

/** backoff is the wait before retry n (0-based): 1 s doubling to 60 s, with ±25% jitter, at least Retry-After. */
export function backoff(n: number, retryAfterS: number | null, jitter: number): number {
  const base = Math.min(MAX_BACKOFF, 1000 * 2 ** Math.min(n, 6)) * (0.75 + jitter / 2);
  return Math.max(base, (retryAfterS || 0) * 1000);
}

/** b64url encodes a string's UTF-8 bytes as unpadded base64url. */
export function b64url(s: string): string {
  return btoa(unescape(encodeURIComponent(s))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** createInlet returns a tracker bound to env. */
export function createInlet(env: Env): Inlet {
  let o: Required<Omit<InitOptions, "writeKey" | "cookie">> & InitOptions;
  let pre: (() => void)[] | null = []; // calls before init
  let mem: WireEvent[] = []; // the queue without storage
  const inflight: Record<string, 1> = {};
  let timer: unknown = null;
  let failures = 0; // consecutive failed attempts
  let waitUntil = 0; // no attempt before this (backoff, Retry-After)
  let sending: Promise<void> | null = null;
  let anon = "";
  let uid = "";

  const st = env.storage;
  const get = (k: string): string | null => {
    try {
      return st ? st.getItem(k) : null;
    } catch {
      return null;
    }
  };
  const put = (k: string, v: string | null): void => {
    try {
      if (st) v == null ? st.removeItem(k) : st.setItem(k, v);
    } catch {
      // full or denied: the queue lives in memory only
    }
  };
  // The queue is read from and written to storage on every change, so that
  // a reload, and another tab of the same site, see it.
  const load = (): WireEvent[] => {
    const s = get(QUEUE);
    if (s == null) return mem;
    try {
      const q = JSON.parse(s);
      return Array.isArray(q) ? q : [];
    } catch {
      return [];
    }
  };
  const save = (q: WireEvent[]): void => {
    if (q.length > o.maxQueue) q = q.slice(q.length - o.maxQueue);
    mem = q;
    put(QUEUE, JSON.stringify(q));
  };
  const drop = (ids: string[]): void => {
    const gone: Record<string, 1> = {};
    for (const id of ids) gone[id] = 1;
    save(load().filter((e) => !gone[e.id]));
  };

  const cookieOpt = (): { domain?: string; maxAgeDays?: number } | null =>
    o.cookie ? (typeof o.cookie == "object" ? o.cookie : {}) : null;
  const readAnon = (): string => {
    const c = cookieOpt();
    if (c && env.cookie) {
      const m = env.cookie.get().match(/(?:^|; )inlet_anon_id=([^;]+)/);
      return m ? decodeURIComponent(m[1]) : "";
    }
    return get(ANON) || "";
  };
  const writeAnon = (id: string): void => {
    const c = cookieOpt();
    if (c && env.cookie) {
      env.cookie.set(
        "inlet_anon_id=" + encodeURIComponent(id) + "; path=/; SameSite=Lax; max-age=" + (c.maxAgeDays || 365) * 86400 + (c.domain ? "; domain=" + c.domain : ""),
      );
    } else put(ANON, id);
  };

  const endpoint = (path: string): string => o.url.replace(/\/+$/, "") + path + (o.writeKey ? (path.includes("?") ? "&" : "?") + "write_key=" + encodeURIComponent(o.writeKey) : "");

  // batches cuts q into bodies under MAX_BODY bytes.
  const batches = (q: WireEvent[]): WireEvent[][] => {
    const out: WireEvent[][] = [];
    let cur: WireEvent[] = [];
    let size = 2;
    for (const e of q) {
      const n = JSON.stringify(e).length + 1;
      if (cur.length && size + n > MAX_BODY) {
        out.push(cur);
        cur = [];
        size = 2;
      }
      cur.push(e);
      size += n;
    }
    if (cur.length) out.push(cur);
    return out;
  };

  const schedule = (ms: number): void => {
    if (timer != null) env.clearTimeout(timer);
    timer = env.setTimeout(() => {
      timer = null;
      void flush();
    }, ms);
  };

  // attempt sends one batch; it resolves to whether to go on.
  const attempt = async (batch: WireEvent[]): Promise<boolean> => {
    const ids = batch.map((e) => e.id);
    for (const id of ids) inflight[id] = 1;
    try {
      if (!env.fetch) {
        for (const e of batch) env.pixel!(endpoint("/i?data=" + b64url(JSON.stringify(e))));
        drop(ids);
        return true;
      }
      let status = 0;
      let ra: number | null = null;
      try {
        // text/plain is a CORS "simple" request: no preflight; inlet reads it as JSON.
        const r = await env.fetch(endpoint("/v1/batch"), {
          method: "POST",
          body: JSON.stringify(batch),
          keepalive: true,
          headers: { "Content-Type": "text/plain" },
          credentials: "omit",
        });
        status = r.status;
        const h = parseInt(r.headers.get("Retry-After") || "", 10);
        ra = isNaN(h) ? null : h;
      } catch {
        status = 0; // offline, refused, CORS: retry
      }
      if (status == 0 || status == 429 || status >= 500) {
        failures++;
        waitUntil = env.now() + backoff(failures - 1, ra, env.random(1)[0] / 255);
        return false;
      }
      // 2xx: taken (invalid events among them are dead-lettered by the
      // gateway); any other 4xx cannot succeed when sent again: drop.
      failures = 0;
      waitUntil = 0;
      drop(ids);
      return true;
    } finally {
      for (const id of ids) delete inflight[id];
    }
  };

  const flush = (): Promise<void> => {
    if (!o) return Promise.resolve();
    if (sending) return sending;
    const wait = waitUntil - env.now();
    if (wait > 0) {
      schedule(wait);
      return Promise.resolve();
    }
    sending = (async () => {
      try {
        for (const b of batches(load().filter((e) => !inflight[e.id]))) {
          if (!(await attempt(b))) break;
        }
      } finally {
        sending = null;
      }
      const left = load().length;
      if (left) schedule(Math.max(waitUntil - env.now(), failures ? 0 : o.flushInterval));
    })();
    return sending;
  };

  // beaconAll hands the queue to sendBeacon as the page goes away. Only
  // while the gateway answered the last attempt: during an outage, or
  // offline, a beacon would be lost, so the events stay stored for the next
  // page load instead.
  const beaconAll = (): void => {
    if (!o || !env.beacon || failures > 0 || (env.online && !env.online())) return;
    for (const b of batches(load().filter((e) => !inflight[e.id]))) {
      if (!env.beacon(endpoint("/v1/batch"), JSON.stringify(b))) return;
      drop(b.map((e) => e.id));
    }
  };

  const enqueue = (e: WireEvent): void => {
    const q = load();
    q.push(e);
    save(q);
    if (q.length >= o.flushAt) void flush();
    else if (timer == null) schedule(Math.max(o.flushInterval, waitUntil - env.now()));
  };

  const make = (name: string, props?: Props, ctx?: Props): WireEvent => {
    const now = env.now();
    const e: WireEvent = { event: name, id: uuidv7(now, env.random(16)), ts: now, anon_id: anon };
    if (uid) e.uid = uid;
    if (props) e.props = props;
    e.context = { library: { name: "inlet.js", version: "1" }, ...(env.location ? { page: { path: env.location.pathname } } : {}), ...ctx };
    return e;
  };

  const later = (f: () => void): void => {
    if (pre) pre.push(f);
    else f();
  };

  const api: Inlet = {
    init(opts) {
      if (!opts || !opts.url) throw new Error("inlet.init: url is required");
      o = { flushAt: 20, flushInterval: 5000, maxQueue: 1000, ...opts };
      anon = readAnon();
      if (!anon) writeAnon((anon = uuidv7(env.now(), env.random(16))));
      uid = get(UID) || "";
      const p = pre!;
      pre = null;
      for (const f of p) f();
      if (load().length) schedule(0); // left from an earlier page
    },
    track(name, props) {
      const e = make(name, props);
      later(() => {
        if (!e.anon_id) e.anon_id = anon;
        if (!e.uid && uid) e.uid = uid;
        enqueue(e);
      });
      return e.id;
    },
    page(props) {
      const l = env.location;
      return api.track("page_view", { ...(l ? { url: l.href, path: l.pathname, title: l.title, referrer: l.referrer } : {}), ...props });
    },
    identify(id) {
      later(() => {
        uid = id;
        put(UID, id || null);
      });
    },
    flush: () => flush(),
    anonymousId: () => anon,
    queued: () => load().length,
  };
  (api as unknown as { _hide: () => void })._hide = beaconAll;
  (api as unknown as { _online: () => void })._online = () => {
    waitUntil = 0;
    void flush();
  };
  return api;
}
