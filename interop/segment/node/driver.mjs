// Sends track, identify, page, screen, group and alias through a real Node
// SDK from npm, unmodified, pointed at inlet by its host setting alone.
//
//	node driver.mjs segment|rudder
//
// Environment: INLET_URL (inlet's base URL), WRITE_KEY, RUN (a prefix of
// the messageIds), ROUNDS (messages of each type, default 3).
//
// It prints one JSON line {"sdk", "sent": [the messages as given to the
// SDK], "errors": [what the SDK reported]} and exits 1 if the SDK reported
// an error.
import { Analytics as SegmentAnalytics } from "@segment/analytics-node";
import RudderAnalytics from "@rudderstack/rudder-sdk-node";

const which = process.argv[2];
const name = "node-" + which;
const { INLET_URL: url, WRITE_KEY: writeKey, RUN: run } = process.env;
const rounds = Number(process.env.ROUNDS || 3);
const errors = [];

let client, flush;
if (which === "segment") {
  // analytics-node sends JSON, no gzip; it retries 5xx and 429.
  client = new SegmentAnalytics({ writeKey, host: url, flushAt: 10, flushInterval: 200, maxRetries: 10 });
  client.on("error", (e) => errors.push({ error: String(e.reason ?? e), code: e.code }));
  flush = () => client.closeAndFlush({ timeout: 120000 });
} else if (which === "rudder") {
  // rudder-sdk-node gzips by default; it retries 5xx, 429 and network errors (retryCount times).
  // Without an errorHandler a failed flush is an unhandled rejection that
  // ends the process; with one, each message's callback gets the error too.
  client = new RudderAnalytics(writeKey, {
    dataPlaneUrl: url, flushAt: 10, flushInterval: 200, retryCount: 8, logLevel: "error",
    errorHandler: (err) => errors.push({ error: String(err?.message ?? err), status: err?.response?.status, body: err?.response?.data }),
  });
  flush = () => new Promise((res) => client.flush(() => res()));
} else {
  console.error(`driver.mjs: segment or rudder, not ${which}`);
  process.exit(2);
}

// Each call's callback is how both SDKs report a message's fate.
const pending = [];
const call = (type, msg) =>
  pending.push(
    new Promise((res) =>
      client[type](msg, (err) => {
        if (err) errors.push({ error: String(err?.message ?? err), status: err?.response?.status, messageId: msg.messageId });
        res();
      }),
    ),
  );

const sent = [];
for (let i = 0; i < rounds; i++) {
  const userId = `u-${name}-${i}`;
  const calls = [
    ["track", { userId, event: "Order Completed", properties: { order_id: `o${i}`, revenue: 12.5, n: i } }],
    ["identify", { userId, traits: { email: `${userId}@example.com`, plan: "pro" } }],
    ["page", { userId, name: "Docs", properties: { path: `/docs/${i}` } }],
    ["screen", { userId, name: "Home", properties: { tab: `t${i}` } }],
    ["group", { userId, groupId: `g-${i}`, traits: { name: `Acme ${i}` } }],
    ["alias", { previousId: `anon-${name}-${i}`, userId }],
  ];
  for (const [type, msg] of calls) {
    msg.messageId = `${run}-${name}-${type}-${i}`;
    sent.push({ type, ...structuredClone(msg) });
    call(type, msg);
  }
}
await flush();
await Promise.all(pending);
console.log(JSON.stringify({ sdk: name, sent, errors }));
process.exit(errors.length ? 1 : 0);
