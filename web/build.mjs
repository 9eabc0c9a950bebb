// Builds the UI into the directory given as the first argument:
// index.html plus content-hashed assets. No inline scripts, so the page
// works under a strict `script-src 'self'` CSP.
import { build } from "esbuild";
import { mkdirSync, readFileSync, rmSync, writeFileSync, copyFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";

const out = process.argv[2] ?? "dist";
rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, "assets"), { recursive: true });

const result = await build({
  entryPoints: ["src/main.ts", "src/style.css"],
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2020"],
  outdir: join(out, "assets"),
  entryNames: "[name]-[hash]",
  metafile: true,
  logLevel: "warning",
});

const outputs = Object.entries(result.metafile.outputs);
const asset = (entry) => {
  const found = outputs.find(([, meta]) => meta.entryPoint === entry);
  if (!found) throw new Error(`no output for ${entry}`);
  return relative(resolve(out), resolve(found[0])).replaceAll("\\", "/");
};

const html = readFileSync("index.html", "utf8")
  .replace("%SCRIPT%", asset("src/main.ts"))
  .replace("%STYLE%", asset("src/style.css"));
writeFileSync(join(out, "index.html"), html);
copyFileSync("favicon.svg", join(out, "assets", "favicon.svg"));
