// Helpers of the browser tests: a real tiphys server on loopback with known accounts and RBAC,
// the tiphys CLI against it, a real OpenID Connect provider (tests/oidc) for single sign-on, and
// headless Debian Chromium driven by playwright-core.
import { spawn, execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { chromium } from "playwright-core";

const run = promisify(execFile);

export const TIPHYS = process.env.TIPHYS_RELEASE_BIN || process.env.TIPHYS_BIN;
if (!TIPHYS) throw new Error("set TIPHYS_RELEASE_BIN (or TIPHYS_BIN) to a tiphys binary");

export const CHROMIUM = process.env.CHROMIUM_BIN || "/usr/bin/chromium";
export const OUT = resolve(process.env.BROWSER_TEST_OUT || new URL("./out", import.meta.url).pathname);
mkdirSync(OUT, { recursive: true });

// Known passwords with bcrypt hashes of cost 4 (quick logins); test data only.
export const ADMIN_PW = "admin-password-1";
export const ALICE_PW = "alice-password-1";
const HASHES = {
  [ADMIN_PW]: "$2b$04$S31sOwtd/zWFJpZR96E1oeduGnckW.SNxgq9BHBVjHkd8EJB2gU.W",
  [ALICE_PW]: "$2b$04$cXhQuEuweeVAp6XBl2Zq3emvHkP.Uxfktr7PoVfSovpVJpFEQksYm",
};

function manifest(kind, name, data, section = "data") {
  // JSON strings are valid YAML double-quoted scalars.
  const lines = ["apiVersion: v1", `kind: ${kind}`, "metadata:", `  name: ${name}`, `${section}:`];
  for (const [k, v] of Object.entries(data)) lines.push(`  ${JSON.stringify(k)}: ${JSON.stringify(v)}`);
  return lines.join("\n") + "\n";
}

/**
 * A config dir: admin (apiKey too) and alice (login) with known passwords, and an RBAC policy;
 * `cm` and `secret` add to argocd-cm and argocd-secret. Each file is replaced whole (a running
 * server never reads half a file), argocd-cm last (it may refer to keys of the secret).
 */
function writeConfig(dir, { policy = [], cm = {}, secret = {} } = {}) {
  mkdirSync(dir, { recursive: true });
  const put = (name, text) => {
    writeFileSync(join(dir, `.${name}.tmp`), text);
    renameSync(join(dir, `.${name}.tmp`), join(dir, name));
  };
  put(
    "argocd-secret.yaml",
    manifest("Secret", "argocd-secret", { "admin.password": HASHES[ADMIN_PW], "accounts.alice.password": HASHES[ALICE_PW], "server.secretkey": "browser-test-secret-key-0123456789", ...secret }, "stringData"),
  );
  put("argocd-rbac-cm.yaml", manifest("ConfigMap", "argocd-rbac-cm", { "policy.csv": policy.join("\n") + "\n" }));
  put("argocd-cm.yaml", manifest("ConfigMap", "argocd-cm", { "accounts.alice": "login", "admin.enabled": "true", "accounts.admin": "login, apiKey", ...cm }));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` until it returns a truthy value or `ms` pass. */
export async function waitFor(what, check, ms = 10000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await check();
      if (last) return last;
    } catch (err) {
      last = err;
    }
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
}

/**
 * Starts `tiphys server` on a free loopback port. Options: policy (RBAC lines), cm (argocd-cm
 * additions), secret (argocd-secret additions), basehref, rootpath, staticassets (else
 * TIPHYS_STATIC_ASSETS, else the embedded UI).
 */
export async function startServer(opts = {}) {
  // `dir` and `port` let a test restart a server on its data and address.
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), "tiphys-browser-"));
  const config = join(dir, "config");
  writeConfig(config, opts);
  const ready = join(dir, "ready.json");
  rmSync(ready, { force: true });
  const args = ["server", "--insecure", "--address", "127.0.0.1", "--port", String(opts.port ?? 0), "--metrics-address", "127.0.0.1", "--metrics-port", "0",
    "--data-dir", join(dir, "data"), "--config-dir", config, "--ready-file", ready, "--log-level", "warn"];
  if (opts.basehref) args.push("--basehref", opts.basehref);
  if (opts.rootpath) args.push("--rootpath", opts.rootpath);
  const assets = opts.staticassets ?? process.env.TIPHYS_STATIC_ASSETS;
  if (assets) args.push("--staticassets", assets);
  const log = join(dir, "server.log");
  const child = spawn(TIPHYS, args, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, NO_COLOR: "1" } });
  const chunks = [];
  child.stderr.on("data", (c) => chunks.push(c));
  const exited = new Promise((r) => child.on("exit", r));
  const info = await waitFor("the server's ready file", () => existsSync(ready) && JSON.parse(readFileSync(ready, "utf8")), 20000).catch((err) => {
    child.kill("SIGKILL");
    throw new Error(`${err.message}\n${Buffer.concat(chunks).toString()}`);
  });
  const prefix = (opts.rootpath || "").replace(/\/+$/, "");
  const origin = `http://127.0.0.1:${info.port}`;
  return {
    port: info.port,
    origin,
    /** The dashboard's URL (with the root path / base href, ending in `/`). */
    url: `${origin}${prefix}/`,
    dir,
    log: () => Buffer.concat(chunks).toString(),
    /** Rewrites the config files while the server runs: `changes` replace those options. */
    reconfigure(changes) {
      writeConfig(config, { ...opts, ...changes });
    },
    /** Stops the server; `keep` leaves its directory for a restart. */
    async stop({ keep = false } = {}) {
      writeFileSync(log, Buffer.concat(chunks));
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        await Promise.race([exited, sleep(5000)]);
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      }
      if (!keep) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A TCP port free on 127.0.0.1 right now (for a program that cannot be given port 0). */
export async function freePort() {
  const probe = createServer();
  await new Promise((r, reject) => probe.once("error", reject).listen(0, "127.0.0.1", r));
  const { port } = probe.address();
  await new Promise((r) => probe.close(r));
  return port;
}

const OIDC_DIR = fileURLToPath(new URL("../oidc/", import.meta.url));

/**
 * Starts the test OpenID Connect provider (npm oidc-provider, tests/oidc/server.mjs: clients
 * `argo-cd` with secret `argo-cd-secret` and `argo-cd-cli`; any login and password; groups
 * ["devs"], plus "admins" for logins starting with "admin") on a free loopback port, allowing
 * `redirectUris`. Stopped by its PID.
 */
export async function startOidcProvider({ redirectUris }) {
  if (!existsSync(join(OIDC_DIR, "node_modules", "oidc-provider"))) {
    throw new Error("oidc-provider is not installed: run `npm ci --prefix tests/oidc` (bash .ci/browser-tests does)");
  }
  const dir = mkdtempSync(join(tmpdir(), "tiphys-oidc-"));
  const port = await freePort();
  const env = { ...process.env, OIDC_PORT: String(port), OIDC_KEY_FILE: join(dir, "key.json"), OIDC_REDIRECT_URIS: redirectUris.join(",") };
  const child = spawn(process.execPath, [join(OIDC_DIR, "server.mjs")], { cwd: OIDC_DIR, stdio: ["ignore", "pipe", "pipe"], env });
  const chunks = [];
  child.stdout.on("data", (c) => chunks.push(c));
  child.stderr.on("data", (c) => chunks.push(c));
  const exited = new Promise((r) => child.on("exit", r));
  const output = () => Buffer.concat(chunks).toString();
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      await Promise.race([exited, sleep(5000)]);
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    }
    rmSync(dir, { recursive: true, force: true });
  };
  await waitFor("the OIDC provider to listen", () => {
    if (child.exitCode !== null) throw new Error(`the OIDC provider exited with ${child.exitCode}`);
    return output().includes("oidc-provider issuer");
  }, 15000).catch(async (err) => {
    await stop();
    throw new Error(`${err.message}\n${output()}`);
  });
  return { port, issuer: `http://127.0.0.1:${port}`, log: output, stop };
}

/** A REST session token (for the CLI and for setting up data). */
export async function token(server, username = "admin", password = ADMIN_PW) {
  const res = await fetch(`${server.url}api/v1/session`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ username, password }) });
  if (!res.ok) throw new Error(`login ${username}: ${res.status} ${await res.text()}`);
  return (await res.json()).token;
}

/** Runs the tiphys CLI against the server (plaintext gRPC) with a token; returns stdout. */
export async function cli(server, authToken, ...args) {
  // The token goes in the environment, not argv, so that failures do not print it.
  const env = { ...process.env, NO_COLOR: "1", TIPHYS_CONFIG: join(server.dir, "cli-config"), TIPHYS_AUTH_TOKEN: authToken };
  const conn = ["--server", `127.0.0.1:${server.port}`, "--plaintext"];
  if (server.url !== `${server.origin}/`) conn.push("--grpc-web-root-path", new URL(server.url).pathname.replace(/^\/|\/$/g, ""));
  const { stdout } = await run(TIPHYS, [...args, ...conn], { env, timeout: 20000 });
  return stdout;
}

/** REST with a bearer token (bearer calls are exempt from the browser CSRF check). */
export async function api(server, authToken, method, path, body) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { Authorization: `Bearer ${authToken}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : {};
}

export async function launch() {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

/** A page that fails the test on any console error or uncaught exception. */
export async function newPage(browser, opts = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, ...opts });
  const page = await context.newPage();
  page.setDefaultTimeout(10000);
  page.problems = [];
  page.on("pageerror", (err) => page.problems.push(`pageerror: ${err.message}`));
  page.on("console", (msg) => {
    // A failed fetch of a forbidden resource is logged by Chromium; the app handles it.
    if (msg.type() === "error" && !/status of (401|403|404)/.test(msg.text())) page.problems.push(`console: ${msg.text()}`);
  });
  return page;
}

export async function shot(page, name) {
  await page.screenshot({ path: join(OUT, `${name}.png`), fullPage: false });
}

/** Logs in through the login page. */
export async function login(page, server, username = "admin", password = ADMIN_PW) {
  await page.goto(`${server.url}login`);
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Log in" }).click();
  await page.waitForURL(`${server.url}applications**`);
}

/**
 * A reverse proxy on loopback that serves the server under `prefix` and strips it, as a proxy in
 * front of `--basehref` does. Streams bodies through (the SSE watch keeps working).
 */
export async function startPrefixProxy(server, prefix) {
  const http = await import("node:http");
  const proxy = http.createServer((req, res) => {
    if (!req.url.startsWith(prefix)) {
      res.writeHead(404).end("outside the prefix");
      return;
    }
    const upstream = http.request(
      { host: "127.0.0.1", port: server.port, method: req.method, path: req.url.slice(prefix.length - 1) || "/", headers: req.headers },
      (up) => {
        res.writeHead(up.statusCode, up.headers);
        res.flushHeaders(); // a stream's headers must not wait for its first event
        up.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  const port = proxy.address().port;
  return {
    url: `http://127.0.0.1:${port}${prefix}`,
    origin: `http://127.0.0.1:${port}`,
    port: server.port,
    dir: server.dir,
    async stop() {
      proxy.closeAllConnections();
      await new Promise((r) => proxy.close(r));
    },
  };
}
