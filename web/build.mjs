// Builds the UI into the directory given as the first argument:
// index.html plus content-hashed assets. No inline scripts, so the page
// works under a strict `script-src 'self'` CSP. Code that only some pages
// need (the YAML library) is split into chunks loaded on demand.
import { build } from "esbuild";
import { mkdirSync, readFileSync, rmSync, writeFileSync, copyFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";

const out = process.argv[2] ?? "dist";
const pkg = JSON.parse(readFileSync("package.json", "utf8"));
rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, "assets"), { recursive: true });

const result = await build({
  entryPoints: ["src/main.tsx", "src/style.css"],
  bundle: true,
  minify: true,
  splitting: true,
  format: "esm",
  target: ["es2020"],
  jsx: "automatic",
  jsxImportSource: "preact",
  define: { __UI_VERSION__: JSON.stringify(pkg.version) },
  outdir: join(out, "assets"),
  entryNames: "[name]-[hash]",
  chunkNames: "chunk-[hash]",
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
  .replace("%SCRIPT%", asset("src/main.tsx"))
  .replace("%STYLE%", asset("src/style.css"));
writeFileSync(join(out, "index.html"), html);
copyFileSync("favicon.svg", join(out, "assets", "favicon.svg"));
