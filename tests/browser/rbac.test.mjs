// A user limited by RBAC: sees only what the policy lets them get, finds write actions
// disabled, and receives no data about applications they may not see (lists, the live stream,
// direct requests).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { ALICE_PW, api, cli, launch, login, newPage, shot, startServer, token } from "./harness.mjs";

const REPO = "https://github.com/argoproj/argocd-example-apps.git";
const body = (name) => ({
  metadata: { name },
  spec: { destination: { server: "https://kubernetes.default.svc", namespace: "default" }, source: { repoURL: REPO, path: "guestbook" } },
});

describe("a user limited by RBAC", () => {
  let server, browser, page, adminToken;
  const bodies = [];

  before(async () => {
    server = await startServer({ policy: ["p, alice, applications, get, default/visible-*, allow", "p, alice, projects, get, default, allow"] });
    adminToken = await token(server);
    await api(server, adminToken, "POST", "api/v1/applications", body("visible-one"));
    await api(server, adminToken, "POST", "api/v1/applications", body("secret-two"));
    browser = await launch();
    page = await newPage(browser);
    // Every JSON answer the page receives (streams are read from inside the page below).
    page.on("response", async (res) => {
      if (!/json/.test(res.headers()["content-type"] ?? "")) return;
      try {
        bodies.push(`${res.url()} ${await res.text()}`);
      } catch {
        // a body the page has already discarded
      }
    });
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  it("sees only the applications the policy allows", async () => {
    await login(page, server, "alice", ALICE_PW);
    await page.locator('[data-app="visible-one"]').waitFor();
    await page.getByTestId("app-count").filter({ hasText: "1 of 1" }).waitFor();
    assert.equal(await page.locator('[data-app="secret-two"]').count(), 0);
    assert.equal(await page.getByTestId("new-app").isDisabled(), true, "cannot create");
    await shot(page, "20-rbac-list");
  });

  it("finds sync, delete and edit disabled", async () => {
    await page.getByRole("link", { name: "visible-one" }).click();
    await page.getByTestId("app-name").waitFor();
    await page.locator('[data-testid="sync"][data-permitted="false"]').waitFor();
    assert.equal(await page.getByTestId("sync").isDisabled(), true);
    assert.equal(await page.getByTestId("delete").isDisabled(), true);
    assert.equal(await page.getByTestId("delete").getAttribute("title"), "You are not permitted to do this");
    await page.getByRole("tab", { name: "Edit spec" }).click();
    assert.equal(await page.getByRole("button", { name: "Save spec" }).isDisabled(), true);
    await shot(page, "21-rbac-details");
  });

  it("receives nothing about forbidden applications, live changes included", async () => {
    await page.goto(`${server.url}applications`);
    await page.locator('[data-app="visible-one"]').waitFor();
    // Read the watch stream from inside the page while the admin changes both applications.
    const streamed = page.evaluate(async () => {
      const ctl = new AbortController();
      const res = await fetch("api/v1/stream/applications?resourceVersion=1", { headers: { Accept: "text/event-stream" }, signal: ctl.signal });
      const reader = res.body.getReader();
      let text = "";
      const stop = setTimeout(() => ctl.abort(), 3000);
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          text += new TextDecoder().decode(value);
        }
      } catch {
        // aborted after 3 s
      }
      clearTimeout(stop);
      return text;
    });
    await new Promise((r) => setTimeout(r, 500));
    await cli(server, adminToken, "app", "set", "secret-two", "--path", "changed-secret");
    await cli(server, adminToken, "app", "set", "visible-one", "--path", "changed-visible");
    const text = await streamed;
    assert.match(text, /changed-visible/, "the stream carries the allowed change");
    assert.doesNotMatch(text, /secret-two|changed-secret/);
    await page.locator('[data-app="visible-one"] [data-field="source"]').filter({ hasText: "changed-visible" }).waitFor();
    const direct = await page.evaluate(async () => (await fetch("api/v1/applications/secret-two")).status);
    assert.ok(direct === 403 || direct === 404, `direct GET answered ${direct}`);
    const all = bodies.join("\n");
    assert.ok(bodies.length > 3, "responses were captured");
    assert.doesNotMatch(all, /secret-two|changed-secret/);
  });
});
