// The main flow as an administrator: local login, create an application, watch it change live
// when the CLI changes it, sync, delete, the settings pages, logout; plus escaping and return_url.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { api, cli, launch, login, newPage, shot, startServer, token, waitFor } from "./harness.mjs";

const REPO = "https://github.com/argoproj/argocd-example-apps.git";
const SSH_REPO = "ssh://git@github.com/argoproj/argocd-example-apps.git";

describe("dashboard as admin", () => {
  let server, browser, page, adminToken;

  before(async () => {
    server = await startServer();
    adminToken = await token(server);
    browser = await launch();
    page = await newPage(browser);
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  it("refuses a wrong password with a fixed message, then logs in", async () => {
    await page.goto(`${server.url}applications`);
    await page.waitForURL(/\/login\?return_url=/);
    await shot(page, "01-login");
    await page.getByLabel("Username").fill("admin");
    await page.getByLabel("Password").fill("wrong-password");
    await page.getByRole("button", { name: "Log in" }).click();
    await page.getByRole("alert").waitFor();
    assert.equal(await page.getByRole("alert").innerText(), "Invalid username or password.");
    assert.equal(await page.getByTestId("sso").count(), 0, "no SSO button without an OIDC provider");
    await page.getByLabel("Password").fill("admin-password-1");
    await page.getByRole("button", { name: "Log in" }).click();
    await page.waitForURL(`${server.url}applications`);
    await page.getByTestId("app-count").filter({ hasText: "0 of 0" }).waitFor();
    assert.equal(await page.getByTestId("current-user").innerText(), "admin");
    await shot(page, "02-applications-empty");
  });

  it("creates an application with the form and shows its details", async () => {
    await page.getByTestId("new-app").click();
    await page.waitForURL(/applications\/new$/);
    await page.getByLabel("Name", { exact: true }).fill("guestbook");
    await page.getByLabel("Repository URL").fill(REPO);
    await page.getByLabel("Path", { exact: true }).fill("guestbook");
    await page.getByLabel("Labels").fill("team=web");
    await shot(page, "03-create-form");
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/applications\/argocd\/guestbook$/);
    assert.equal(await page.getByTestId("app-name").innerText(), "guestbook");
    await page.getByTestId("sources").getByText("guestbook").waitFor();
    const created = await api(server, adminToken, "GET", "api/v1/applications/guestbook");
    assert.equal(created.spec.source.repoURL, REPO);
    assert.deepEqual(created.metadata.labels, { team: "web" });
    await shot(page, "04-details");
  });

  it("creates an application from YAML", async () => {
    await page.goto(`${server.url}applications/new`);
    await page.getByRole("button", { name: "YAML / JSON" }).click();
    await page.getByTestId("manifest").fill(
      ["apiVersion: argoproj.io/v1alpha1", "kind: Application", "metadata:", "  name: from-yaml", "spec:", "  project: default",
        "  source:", `    repoURL: ${REPO}`, "    path: helm-guestbook", "  destination:", "    server: https://kubernetes.default.svc", "    namespace: web"].join("\n"),
    );
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/applications\/argocd\/from-yaml$/);
    const app = await api(server, adminToken, "GET", "api/v1/applications/from-yaml");
    assert.equal(app.spec.destination.namespace, "web");
  });

  it("shows applications appear and change live when the CLI changes them", async () => {
    await page.getByRole("link", { name: "Applications" }).first().click();
    await page.waitForURL(`${server.url}applications`);
    const tile = page.locator('[data-app="guestbook"]');
    await tile.waitFor();
    await page.getByTestId("live").filter({ hasText: "Live" }).waitFor();
    // A change made elsewhere reaches the open page without a reload.
    await cli(server, adminToken, "app", "set", "guestbook", "--path", "kustomize-guestbook", "--revision", "v2");
    await tile.locator('[data-field="source"]').filter({ hasText: "kustomize-guestbook @ v2" }).waitFor({ timeout: 5000 });
    await cli(server, adminToken, "app", "create", "cli-made", "--repo", REPO, "--path", "guestbook", "--dest-server", "https://kubernetes.default.svc", "--dest-namespace", "default");
    await page.locator('[data-app="cli-made"]').waitFor({ timeout: 5000 });
    await page.getByTestId("app-count").filter({ hasText: "3 of 3" }).waitFor();
    await cli(server, adminToken, "app", "delete", "cli-made", "--yes").catch(async () => cli(server, adminToken, "app", "delete", "cli-made"));
    await page.locator('[data-app="cli-made"]').waitFor({ state: "detached", timeout: 5000 });
    await shot(page, "05-applications-tiles");
  });

  it("searches, filters and switches to the table", async () => {
    await page.getByLabel("Search applications").fill("yaml");
    await page.getByTestId("app-count").filter({ hasText: "1 of 2" }).waitFor();
    assert.match(page.url(), /search=yaml/);
    await page.getByLabel("Search applications").fill("");
    await page.getByRole("checkbox", { name: "web" }).check(); // the destination namespace
    await page.getByTestId("app-count").filter({ hasText: "1 of 2" }).waitFor();
    assert.equal(await page.locator('[data-app="from-yaml"]').count(), 1);
    await page.getByRole("checkbox", { name: "web" }).uncheck();
    await page.getByLabel("Label filter (key=value)").fill("team=web");
    await page.getByRole("button", { name: "Add", exact: true }).click();
    await page.getByTestId("app-count").filter({ hasText: "1 of 2" }).waitFor();
    assert.equal(await page.locator('[data-app="guestbook"]').count(), 1);
    await page.getByRole("button", { name: "Table" }).click();
    await page.getByRole("row").filter({ hasText: "guestbook" }).waitFor();
    await shot(page, "06-applications-table");
    await page.getByRole("button", { name: "Clear filters" }).click();
    await page.getByTestId("app-count").filter({ hasText: "2 of 2" }).waitFor();
    await page.getByRole("button", { name: "Tiles" }).click();
  });

  it("syncs from the panel (prune, dry run, revision) and shows the recorded operation, the YAML and the history", async () => {
    await page.locator('[data-app="guestbook"]').getByRole("link", { name: "guestbook" }).click();
    await page.waitForURL(/applications\/argocd\/guestbook$/);
    await page.getByTestId("sync").click();
    const panel = page.getByRole("dialog");
    // A file-backed server has no controller: no resources reported, the whole app is synced.
    await panel.getByText("has not reported any resources").waitFor();
    const before = await api(server, adminToken, "GET", "api/v1/applications/guestbook");
    assert.equal(await page.getByTestId("sync-revision").inputValue(), before.spec.source.targetRevision || "HEAD", "starts at the target revision");
    await page.getByTestId("sync-revision").fill("main");
    await page.getByTestId("sync-prune").check();
    await page.getByTestId("sync-dry-run").check();
    await shot(page, "07a-sync-panel");
    const sent = page.waitForRequest((r) => r.method() === "POST" && r.url().endsWith("api/v1/applications/guestbook/sync"));
    await page.getByTestId("confirm-sync").click();
    const body = JSON.parse((await sent).postData());
    assert.deepEqual(body, { name: "guestbook", appNamespace: "argocd", revision: "main", prune: true, dryRun: true });
    await page.getByTestId("operation-requested").getByText("Requested operation: admin asked for a sync of main").waitFor();
    assert.equal(await page.getByRole("dialog").count(), 0, "the panel closes once the request is accepted");
    const app = await api(server, adminToken, "GET", "api/v1/applications/guestbook");
    assert.equal(app.operation?.sync?.revision, "main", "the server recorded the sync operation");
    assert.equal(app.operation.sync.prune, true);
    assert.equal(app.operation.sync.dryRun, true);
    assert.equal(app.operation.initiatedBy?.username, "admin");
    // A second sync while the first is recorded: the panel stays open with the API's message.
    await page.getByTestId("sync").click();
    await page.getByTestId("confirm-sync").click();
    await page.getByRole("dialog").getByRole("alert").filter({ hasText: "another operation is already in progress" }).waitFor();
    await page.getByRole("dialog").getByRole("button", { name: "Cancel" }).click();
    assert.equal(await page.getByRole("dialog").count(), 0);
    // That refusal (400, FailedPrecondition) was expected: it is no console problem.
    page.problems = page.problems.filter((p) => !/status of 400/.test(p));
    // No operation runs (no controller), so there is nothing to terminate.
    assert.equal(await page.getByTestId("terminate").count(), 0);
    await page.getByTestId("operation-requested").getByText("The requested operation").click();
    const operationYaml = page.getByTestId("operation").getByTestId("yaml");
    await operationYaml.filter({ hasText: "sync:" }).waitFor();
    await shot(page, "07-details-synced");
    await page.getByRole("tab", { name: "YAML" }).click();
    await page.getByTestId("yaml").filter({ hasText: "kustomize-guestbook" }).waitFor();
    await shot(page, "08-details-yaml");
    await page.getByRole("tab", { name: "Resources" }).click();
    await page.getByText("has not reported any resources").waitFor();
    await page.getByRole("tab", { name: "History" }).click();
    await page.getByText(/No deployments yet|Revision/).first().waitFor();
  });

  it("edits the spec", async () => {
    // A pending operation blocks nothing here, but clear it to keep the spec edit simple.
    await api(server, adminToken, "DELETE", "api/v1/applications/guestbook/operation").catch(() => {});
    await page.goto(`${server.url}applications/argocd/guestbook/edit`);
    const editor = page.getByTestId("spec-editor");
    await editor.waitFor();
    const text = await editor.inputValue();
    assert.match(text, /kustomize-guestbook/);
    await editor.fill(text.replace("kustomize-guestbook", "edited-path"));
    await page.getByRole("button", { name: "Save spec" }).click();
    await page.getByText("Spec saved.").waitFor();
    await waitFor("the edited spec", async () => (await api(server, adminToken, "GET", "api/v1/applications/guestbook")).spec.source.path === "edited-path");
    await shot(page, "09-details-edit");
  });

  it("deletes an application", async () => {
    await page.goto(`${server.url}applications/argocd/from-yaml`);
    await page.getByTestId("delete").click();
    const confirm = page.getByRole("dialog").getByRole("button", { name: "Delete" });
    assert.equal(await confirm.isDisabled(), true, "deleting waits for the name to be typed");
    await page.getByTestId("delete-name").fill("from-yaml");
    await page.getByTestId("delete-non-cascading").check();
    const sent = page.waitForRequest((r) => r.method() === "DELETE" && r.url().includes("api/v1/applications/from-yaml"));
    await confirm.click();
    const url = new URL((await sent).url());
    assert.equal(url.searchParams.get("cascade"), "false");
    assert.equal(url.searchParams.get("propagationPolicy"), null);
    await page.waitForURL(`${server.url}applications`);
    await page.getByTestId("app-count").filter({ hasText: "1 of 1" }).waitFor();
    await assert.rejects(api(server, adminToken, "GET", "api/v1/applications/from-yaml"), /404/);
  });

  it("escapes every value and never links a javascript: URL", async () => {
    const evil = '<img src=x onerror="window.__pwned=1">';
    await api(server, adminToken, "POST", "api/v1/applications", {
      metadata: { name: "escaped", labels: { note: "b" }, annotations: { note: evil } },
      spec: { destination: { server: "https://kubernetes.default.svc", namespace: "default" }, source: { repoURL: SSH_REPO, path: evil } },
    });
    await page.goto(`${server.url}applications/argocd/escaped`);
    await page.getByText(evil).first().waitFor();
    // The server refuses javascript: repository URLs; an ssh: one is shown, but as text only.
    await page.getByTestId("sources").getByText(SSH_REPO).waitFor();
    assert.equal(await page.getByTestId("sources").getByRole("link").count(), 0);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    assert.equal(await page.locator("img").count(), 0);
    // The rendered links: none has a scheme other than http(s).
    const hrefs = await page.locator("a[href]").evaluateAll((as) => as.map((a) => a.href));
    for (const h of hrefs) assert.match(h, /^https?:/, h);
    await api(server, adminToken, "DELETE", "api/v1/applications/escaped");
  });

  it("shows projects, adds a destination, a role and a token shown once", async () => {
    await page.getByRole("link", { name: "Projects" }).click();
    await page.getByTestId("projects").getByRole("link", { name: "default" }).waitFor();
    await shot(page, "10-projects");
    await page.getByRole("form", { name: "New project" }).getByLabel("Name").fill("team-a");
    await page.getByRole("button", { name: "Create project" }).click();
    await page.getByTestId("projects").getByRole("link", { name: "team-a" }).click();
    await page.getByTestId("project-name").filter({ hasText: "team-a" }).waitFor();
    await page.getByLabel("destination server").fill("https://kubernetes.default.svc");
    await page.getByLabel("destination namespace").fill("team-a");
    await page.getByRole("button", { name: "Add destination" }).click();
    await page.getByRole("cell", { name: "team-a", exact: true }).waitFor();
    await page.getByLabel("source repository repository").fill(REPO);
    await page.getByRole("button", { name: "Add source repository" }).click();
    await page.getByRole("cell", { name: REPO, exact: true }).waitFor();
    await page.getByLabel("Role name").fill("ci");
    await page.getByLabel("Policy").fill("p, proj:team-a:ci, applications, get, team-a/*, allow");
    await page.getByRole("button", { name: "Add role" }).click();
    await page.getByTestId("token-ci").click();
    const shown = await page.getByTestId("new-token").inputValue();
    assert.match(shown, /^eyJ[\w-]+\.[\w-]+\.[\w-]+$/, "a JWT is shown");
    await shot(page, "11-project-token");
    await page.getByRole("button", { name: "Done" }).click();
    assert.equal(await page.getByTestId("new-token").count(), 0, "the token is shown only once");
    assert.ok(!(await page.content()).includes(shown), "the token is nowhere on the page any more");
    const project = await api(server, adminToken, "GET", "api/v1/projects/team-a");
    assert.equal(project.spec.destinations[0].namespace, "team-a");
    assert.equal(project.spec.roles[0].jwtTokens.length, 1);
  });

  it("adds and removes a cluster without showing its secret", async () => {
    await page.getByRole("link", { name: "Clusters" }).click();
    await page.getByTestId("clusters").waitFor();
    await page.getByLabel("Name", { exact: true }).fill("staging");
    await page.getByLabel("Server URL").fill("https://staging.example.test:6443");
    await page.getByLabel("Bearer token").fill("very-secret-bearer");
    await page.getByRole("button", { name: "Add cluster" }).click();
    await page.getByRole("cell", { name: "https://staging.example.test:6443" }).waitFor();
    assert.ok(!(await page.content()).includes("very-secret-bearer"));
    await shot(page, "12-clusters");
    await page.getByRole("button", { name: "Remove cluster staging" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Remove" }).click();
    await page.getByRole("cell", { name: "https://staging.example.test:6443" }).waitFor({ state: "detached" });
  });

  it("adds and removes repositories and credentials without showing passwords", async () => {
    await page.getByRole("link", { name: "Repositories" }).click();
    await page.getByTestId("repos").waitFor();
    const repoForm = page.getByRole("form", { name: "Add repository" });
    await repoForm.getByLabel("Repository URL").fill("https://git.example.test/private.git");
    await repoForm.getByLabel("Username").fill("robot");
    await repoForm.getByLabel("Password").fill("repo-secret-pw");
    await repoForm.getByRole("button", { name: "Add repository" }).click();
    await page.getByTestId("repos").getByText("https://git.example.test/private.git").waitFor();
    const credsForm = page.getByRole("form", { name: "Add credential template" });
    await credsForm.getByLabel("URL prefix").fill("https://git.example.test/");
    await credsForm.getByLabel("Password").fill("creds-secret-pw");
    await credsForm.getByRole("button", { name: "Add credential template" }).click();
    await page.getByTestId("repocreds").getByText("https://git.example.test/").waitFor();
    const html = await page.content();
    assert.ok(!html.includes("repo-secret-pw") && !html.includes("creds-secret-pw"));
    await shot(page, "13-repositories");
    await page.getByRole("button", { name: "Remove repository https://git.example.test/private.git" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Remove" }).click();
    await page.getByTestId("repos").getByText("https://git.example.test/private.git").waitFor({ state: "detached" });
    await page.getByRole("button", { name: "Remove credentials https://git.example.test/" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Remove" }).click();
    await page.getByTestId("repocreds").getByText("https://git.example.test/").waitFor({ state: "detached" });
  });

  it("shows user info and about", async () => {
    await page.getByRole("link", { name: "User info" }).click();
    assert.equal(await page.getByTestId("username").innerText(), "admin");
    await page.getByRole("form", { name: "Change password" }).waitFor();
    // An API token: shown once, then listed by its id only.
    await page.getByLabel("Token ID (optional)").fill("ci-bot");
    await page.getByRole("button", { name: "Generate token" }).click();
    const shown = await page.getByTestId("new-token").inputValue();
    assert.match(shown, /^eyJ[\w-]+\.[\w-]+\.[\w-]+$/);
    await page.getByTestId("tokens").getByText("ci-bot").waitFor();
    await shot(page, "14-user-info");
    await page.getByRole("button", { name: "Done" }).click();
    assert.ok(!(await page.content()).includes(shown));
    const me = await fetch(`${server.url}api/v1/session/userinfo`, { headers: { Authorization: `Bearer ${shown}` } }).then((r) => r.json());
    assert.equal(me.username, "admin", "the shown token works");
    await page.getByRole("link", { name: "About" }).click();
    const version = await api(server, adminToken, "GET", "api/version");
    await page.getByTestId("server-version").filter({ hasText: version.Version }).waitFor();
    assert.match(await page.getByTestId("ui-version").innerText(), /^\d+\.\d+\.\d+/);
    await shot(page, "15-about");
  });

  it("switches themes and stays keyboard usable", async () => {
    await page.getByTestId("theme").click(); // system -> light
    await page.getByTestId("theme").click(); // light -> dark
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), "dark");
    await page.goto(`${server.url}applications`);
    await page.locator('[data-app="guestbook"]').waitFor();
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), "dark", "the choice is kept");
    await shot(page, "16-applications-dark");
    // The skip link is the first stop, and the first application link is reachable by Tab.
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), "Skip to content");
    let reached = false;
    for (let i = 0; i < 60 && !reached; i++) {
      await page.keyboard.press("Tab");
      reached = await page.evaluate(() => document.activeElement?.textContent === "guestbook");
    }
    assert.ok(reached, "the application link is reachable with the keyboard");
    await page.keyboard.press("Enter");
    await page.waitForURL(/applications\/argocd\/guestbook$/);
    await page.getByTestId("theme").click(); // dark -> system
  });

  it("is usable on a narrow screen", async () => {
    await page.setViewportSize({ width: 390, height: 800 });
    await page.goto(`${server.url}applications`);
    await page.locator('[data-app="guestbook"]').waitFor();
    await page.getByRole("button", { name: "Menu" }).click();
    await page.getByRole("link", { name: "Projects" }).waitFor();
    await shot(page, "17-narrow");
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  it("logs out, then sends the user back where they were after login", async () => {
    await page.goto(`${server.url}applications`);
    await page.getByTestId("logout").click();
    await page.waitForURL(/\/login/);
    const me = await page.evaluate(async () => (await fetch("api/v1/session/userinfo")).json());
    assert.ok(!me.loggedIn, "the session cookie is gone");
    await page.goto(`${server.url}settings/clusters?x=1`);
    await page.waitForURL(/\/login\?return_url=/);
    await page.getByLabel("Username").fill("admin");
    await page.getByLabel("Password").fill("admin-password-1");
    await page.getByRole("button", { name: "Log in" }).click();
    await page.waitForURL(`${server.url}settings/clusters?x=1`);
    // A return_url elsewhere is ignored.
    await page.getByTestId("logout").click();
    await page.waitForURL(/\/login/);
    await page.goto(`${server.url}login?return_url=${encodeURIComponent("https://evil.example.test/")}`);
    await login(page, server);
    assert.equal(new URL(page.url()).origin, server.origin);
  });

  it("changes the password", async () => {
    await page.goto(`${server.url}user-info`);
    const form = page.getByRole("form", { name: "Change password" });
    await form.getByLabel("Current password").fill("admin-password-1");
    await form.getByLabel("New password", { exact: true }).fill("admin-password-2");
    await form.getByLabel("New password again").fill("admin-password-2");
    await form.getByRole("button", { name: "Change password" }).click();
    await page.getByText("Password changed.").waitFor();
    await token(server, "admin", "admin-password-2");
    await assert.rejects(token(server, "admin", "admin-password-1"), /401/);
    assert.deepEqual(page.problems, [], "no console errors or uncaught exceptions");
  });
});
