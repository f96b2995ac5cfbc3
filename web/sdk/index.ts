// inlet.js: the browser tracker of inlet. Loaded with a script tag it sets
// window.inlet; see core.ts for the behaviour and README.md for the snippet.
import { createInlet, type Env, type Inlet } from "./core";

export type { InitOptions, Inlet, Props, WireEvent } from "./core";

declare global {
  interface Window {
    inlet: Inlet;
  }
}

const w = window;
const n = navigator;
const d = document;
let ls: Storage | undefined;
try {
  ls = w.localStorage;
} catch {
  // storage denied (privacy settings): the queue lives in memory
}

const env: Env = {
  now: () => Date.now(),
  random: (k) => crypto.getRandomValues(new Uint8Array(k)),
  storage: ls,
  fetch: w.fetch ? (u, i) => w.fetch(u, i as RequestInit) : undefined,
  beacon: n.sendBeacon ? (u, b) => n.sendBeacon(u, new Blob([b], { type: "text/plain" })) : undefined,
  pixel: (u) => {
    new Image().src = u;
  },
  setTimeout: (f, ms) => w.setTimeout(f, ms),
  clearTimeout: (t) => w.clearTimeout(t as number),
  online: () => n.onLine !== false,
  cookie: { get: () => d.cookie, set: (c) => (d.cookie = c) },
  get location() {
    return { href: location.href, pathname: location.pathname, title: d.title, referrer: d.referrer };
  },
};

const inlet = createInlet(env);
const hooks = inlet as unknown as { _hide(): void; _online(): void };
d.addEventListener("visibilitychange", () => d.visibilityState == "hidden" && hooks._hide());
w.addEventListener("pagehide", () => hooks._hide());
w.addEventListener("online", () => hooks._online());
w.inlet = inlet;
