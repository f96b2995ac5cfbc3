// Builds dist/inlet.js (minified, for pages) and dist/inlet.d.ts (types)
// from sdk/. `node build.mjs --check` builds in memory and fails when the
// committed files differ, like generated code.
import { build } from "esbuild";
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(fileURLToPath(import.meta.url));
const check = process.argv.includes("--check");

/** outputs returns the built files: name → contents. */
export async function outputs() {
  const r = await build({
    entryPoints: [join(root, "sdk/index.ts")],
    bundle: true,
    minify: true,
    format: "iife",
    target: "es2019",
    write: false,
    legalComments: "none",
    banner: { js: "/* inlet.js - github.com/inlet-dev/inlet - MIT */" },
  });
  const dir = mkdtempSync(join(tmpdir(), "inlet-dts-"));
  try {
    execFileSync(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "--declaration", "--emitDeclarationOnly", "--strict", "--target", "es2019",
      "--lib", "es2019,dom", "--moduleResolution", "bundler", "--module", "esnext", "--outFile", join(dir, "inlet.d.ts"), join(root, "sdk/index.ts")], { stdio: "inherit" });
    return { "inlet.js": r.outputFiles[0].text, "inlet.d.ts": readFileSync(join(dir, "inlet.d.ts"), "utf8") };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const out = await outputs();
  let stale = 0;
  for (const [name, text] of Object.entries(out)) {
    const p = join(root, "dist", name);
    if (check) {
      let have = "";
      try { have = readFileSync(p, "utf8"); } catch {}
      if (have !== text) { console.error(`dist/${name} is stale: run npm run build in web/`); stale++; }
    } else writeFileSync(p, text);
  }
  process.exit(stale ? 1 : 0);
}
