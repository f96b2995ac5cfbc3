// The committed build (dist/) is what sdk/ builds, and small enough.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { join } from "node:path";
import { root } from "./helpers.mjs";
import { outputs } from "../build.mjs";

test("dist/ is what sdk/ builds (run npm run build in web/)", async () => {
  const out = await outputs();
  for (const [name, text] of Object.entries(out)) {
    assert.equal(readFileSync(join(root, "dist", name), "utf8"), text, `dist/${name} is stale: run npm run build in web/`);
  }
});

test("inlet.js is at most 4 KB gzipped", () => {
  const n = gzipSync(readFileSync(join(root, "dist/inlet.js")), { level: 9 }).length;
  assert.ok(n <= 4096, `inlet.js is ${n} bytes gzipped; the budget is 4096`);
});
