// Unit tests of the dashboard's own logic: each test/*.test.ts is bundled by esbuild (the same
// compiler as the build) into a temporary directory and run with node's built-in test runner.
import { build } from "esbuild";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";

const here = new URL(".", import.meta.url).pathname;
const files = readdirSync(here).filter((f) => f.endsWith(".test.ts") || f.endsWith(".test.tsx"));
const out = mkdtempSync(join(tmpdir(), "tiphys-web-test-"));
try {
  await build({
    entryPoints: files.map((f) => join(here, f)),
    bundle: true,
    platform: "node",
    format: "esm",
    target: ["node20"],
    jsx: "automatic",
    jsxImportSource: "preact",
    outdir: out,
    outExtension: { ".js": ".mjs" },
    define: { __UI_VERSION__: '"test"' },
    logLevel: "warning",
  });
  const built = readdirSync(out).map((f) => join(out, f));
  const r = spawnSync(process.execPath, ["--test", ...built], { stdio: "inherit" });
  process.exitCode = r.status ?? 1;
} finally {
  rmSync(out, { recursive: true, force: true });
}
