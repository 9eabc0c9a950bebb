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
 * TIPHYS_STATIC_ASSETS, else the embedded UI), args (more arguments, such as a replica's
 * `etcd.flags(prefix)`).
 */
export async function startServer(opts = {}) {
  // `dir` and `port` let a test restart a server on its data and address.
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), "tiphys-browser-"));
  const config = join(dir, "config");
  writeConfig(config, opts);
  const ready = join(dir, "ready.json");
  rmSync(ready, { force: true });
  // `tls`: the server's own generated certificate (HTTP/2 to the browser), else plaintext.
  const args = ["server", ...(opts.tls ? [] : ["--insecure"]), "--address", "127.0.0.1", "--port", String(opts.port ?? 0), "--metrics-address", "127.0.0.1", "--metrics-port", "0",
    "--data-dir", join(dir, "data"), "--config-dir", config, "--ready-file", ready, "--log-level", "warn"];
  if (opts.basehref) args.push("--basehref", opts.basehref);
  if (opts.rootpath) args.push("--rootpath", opts.rootpath);
  const assets = opts.staticassets ?? process.env.TIPHYS_STATIC_ASSETS;
  if (assets) args.push("--staticassets", assets);
  if (opts.args) args.push(...opts.args);
  const log = join(dir, "server.log");
  // Stops are immediate unless a test gives --shutdown-delay (the flag wins over the variable);
  // the made-up repository URLs of the tests are not contacted (--repo-access off).
  const child = spawn(TIPHYS, args, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, NO_COLOR: "1", TIPHYS_SHUTDOWN_DELAY: "0", TIPHYS_REPO_ACCESS: "off", TIPHYS_CLUSTER_ACCESS: "off" } });
  const chunks = [];
  child.stderr.on("data", (c) => chunks.push(c));
  const exited = new Promise((r) => child.on("exit", r));
  const info = await waitFor("the server's ready file", () => existsSync(ready) && JSON.parse(readFileSync(ready, "utf8")), 20000).catch((err) => {
    child.kill("SIGKILL");
    throw new Error(`${err.message}\n${Buffer.concat(chunks).toString()}`);
  });
  const prefix = (opts.rootpath || "").replace(/\/+$/, "");
  const origin = `${opts.tls ? "https" : "http"}://127.0.0.1:${info.port}`;
  return {
    port: info.port,
    metricsPort: info.metrics_port,
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

/** Stops a child process started here (by its PID): SIGTERM, SIGKILL after `ms`. */
async function stopChild(child, exited, ms = 5000) {
  if (child.exitCode === null && child.signalCode === null) {
    child.kill("SIGTERM");
    await Promise.race([exited, sleep(ms)]);
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await Promise.race([exited, sleep(ms)]);
    }
  }
}

/** Output of a child process, kept in memory. */
function capture(child) {
  const chunks = [];
  child.stdout?.on("data", (c) => chunks.push(c));
  child.stderr?.on("data", (c) => chunks.push(c));
  return () => Buffer.concat(chunks).toString();
}

/**
 * A real one-member etcd (Debian's `etcd`, package etcd-server) on free loopback ports with its
 * data in a temp dir, healthy when this returns (bounded); `flags(prefix)` are the arguments of a
 * replica keeping its store under `prefix`. Stopped by its PID.
 */
export async function startEtcd() {
  let last;
  // Ports are free when picked but may be taken before etcd binds them: start over.
  for (let attempt = 0; attempt < 3; attempt++) {
    const dir = mkdtempSync(join(tmpdir(), "tiphys-etcd-"));
    const client = `http://127.0.0.1:${await freePort()}`;
    let peer = `http://127.0.0.1:${await freePort()}`;
    while (peer === client) peer = `http://127.0.0.1:${await freePort()}`;
    const args = ["--name", "m0", "--data-dir", join(dir, "m0"), "--listen-client-urls", client, "--advertise-client-urls", client,
      "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", `m0=${peer}`,
      "--initial-cluster-state", "new", "--logger", "zap", "--log-outputs", "stderr"];
    const child = spawn("etcd", args, { stdio: ["ignore", "pipe", "pipe"] });
    const output = capture(child);
    const exited = new Promise((r) => child.on("exit", r));
    const spawned = await new Promise((r) => child.once("spawn", () => r(true)).once("error", (err) => r(err)));
    if (spawned !== true) throw new Error(`cannot run etcd (install the Debian package etcd-server): ${spawned.message}`);
    const stop = async () => {
      await stopChild(child, exited, 10000);
      rmSync(dir, { recursive: true, force: true });
    };
    try {
      await waitFor("etcd to answer /health", async () => {
        if (child.exitCode !== null) throw new Error(`etcd exited with ${child.exitCode}`);
        const res = await fetch(`${client}/health`, { signal: AbortSignal.timeout(2000) });
        return res.ok && (await res.json()).health === "true";
      }, 30000);
    } catch (err) {
      last = `${err.message}\n${output().slice(-3000)}`;
      await stop();
      continue;
    }
    return { endpoints: [client], flags: (prefix) => ["--etcd-endpoints", client, "--etcd-prefix", prefix], log: output, stop };
  }
  throw new Error(`etcd did not start in 3 attempts; last: ${last}`);
}

/**
 * haproxy (Debian) in front of `servers`: TLS terminated here (a self-signed certificate for
 * 127.0.0.1, h2 and http/1.1 by ALPN) and every request balanced on its own over the servers'
 * plaintext ports with `balance roundrobin`, no stickiness. It logs one line per request (when
 * it ends); `requests()` parses them. The dashboard's URL is `url`. Stopped by its PID.
 */
export async function startRoundRobin(servers) {
  const dir = mkdtempSync(join(tmpdir(), "tiphys-haproxy-"));
  const pem = join(dir, "proxy.pem");
  await run("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", join(dir, "proxy.key"), "-out", join(dir, "proxy.crt")], { timeout: 60000 });
  writeFileSync(pem, readFileSync(join(dir, "proxy.crt"), "utf8") + readFileSync(join(dir, "proxy.key"), "utf8"));
  const cfg = join(dir, "haproxy.cfg");
  const https = await import("node:https");
  const answers = (port) => new Promise((r) => {
    const req = https.get(`https://127.0.0.1:${port}/api/version`, { rejectUnauthorized: false, timeout: 2000 }, (res) => {
      res.resume();
      r(res.statusCode);
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => r(0));
  });
  let port, child, output, exited, last;
  // A port is free when picked but may be taken before haproxy binds it: start over.
  for (let attempt = 0; attempt < 3 && !output; attempt++) {
    port = await freePort();
    writeFileSync(cfg, [
      "global",
      "  maxconn 256",
      "  log stdout format raw local0",
      "defaults",
      "  mode http",
      "  log global",
      // One line per request: the server that answered, the status, the method, the URI, the
      // total time (ms) and how the session ended (haproxy's termination state, "--" if normally).
      '  log-format "request %s %ST %HM %HU %Tt %ts"',
      "  timeout connect 5s",
      "  timeout client 60s",
      "  timeout server 60s", // the server sends an SSE keepalive every 15 s
      "  timeout http-keep-alive 10s",
      "frontend dashboard",
      `  bind 127.0.0.1:${port} ssl crt ${pem} alpn h2,http/1.1`,
      "  default_backend replicas",
      "backend replicas",
      "  balance roundrobin", // no cookie, no stick table, no prefer-last-server: per request
      "  option abortonclose", // a stream the browser drops ends on the server at once
      ...servers.map((s, i) => `  server r${i} 127.0.0.1:${s.port}`),
      "",
    ].join("\n"));
    await run("haproxy", ["-c", "-q", "-f", cfg], { timeout: 30000 }).catch((err) => {
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`haproxy refuses its configuration: ${err.stdout}${err.stderr}`);
    });
    child = spawn("haproxy", ["-db", "-f", cfg], { stdio: ["ignore", "pipe", "pipe"] });
    const out = capture(child);
    exited = new Promise((r) => child.on("exit", r));
    try {
      await waitFor("haproxy to answer", async () => {
        if (child.exitCode !== null) throw new Error(`haproxy exited with ${child.exitCode}: ${out()}`);
        return (await answers(port)) === 200;
      }, 15000);
      output = out;
    } catch (err) {
      last = err.message;
      await stopChild(child, exited);
    }
  }
  if (!output) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`haproxy did not start in 3 attempts; last: ${last}`);
  }
  const stop = async () => {
    await stopChild(child, exited);
    rmSync(dir, { recursive: true, force: true });
  };
  const origin = `https://127.0.0.1:${port}`;
  const lb = {
    port,
    origin,
    url: `${origin}/`,
    log: output,
    /** The requests haproxy has logged so far, in order: { server: index, status, method, uri, ms, end }. */
    requests() {
      return [...output().matchAll(/^request r(\d+) (-?\d+) (\S+) (\S+) (-?\d+) (\S+)$/gm)].map((m) => ({
        server: Number(m[1]), status: Number(m[2]), method: m[3], uri: m[4], ms: Number(m[5]), end: m[6],
      }));
    },
    stop,
  };
  // Its log line has arrived here too, so a count of requests() taken now includes it.
  await waitFor("haproxy's log of the readiness check", () => lb.requests().some((r) => r.status === 200), 5000).catch(async (err) => {
    await stop();
    throw new Error(`${err.message}\n${output()}`);
  });
  return lb;
}

/** How many requests `server` has answered (every protocol and outcome), from its /metrics. */
export async function answered(server) {
  const text = await (await fetch(`http://127.0.0.1:${server.metricsPort}/metrics`)).text();
  const counts = [...text.matchAll(/^tiphys_requests_total\{[^}]*\} (\d+)$/gm)];
  if (counts.length === 0) throw new Error(`no tiphys_requests_total in the metrics:\n${text.slice(0, 2000)}`);
  return counts.reduce((sum, m) => sum + Number(m[1]), 0);
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
