// Single sign-on through a real OpenID Connect provider (npm oidc-provider on loopback, as in the
// e2e SSO tests): the login page offers "Log in via <name>", the provider's own login form leads
// back to the dashboard logged in (on the return_url), user info shows the SSO user and groups,
// a user whose groups the policy limits finds actions disabled, and logout ends at the provider's
// end-session page, after which the dashboard wants a login again.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { api, launch, newPage, shot, startOidcProvider, startServer, token, waitFor } from "./harness.mjs";

const REPO = "https://github.com/argoproj/argocd-example-apps.git";
const IDP = "Test IdP";

/** `oidc.config` for the test provider, as the e2e tests write it (YAML as JSON). */
const oidcConfig = (provider) =>
  JSON.stringify({
    name: IDP,
    issuer: provider.issuer,
    clientID: "argo-cd",
    clientSecret: "$oidc.clientSecret",
    cliClientID: "argo-cd-cli",
    requestedScopes: ["openid", "profile", "email", "groups", "offline_access"],
  });

/**
 * A page for the SSO flow. The provider's pages import a web font from the internet: such
 * requests are answered here, empty, and recorded; everything else stays on loopback.
 */
async function ssoPage(browser, outside) {
  const page = await newPage(browser);
  await page.context().route(
    (url) => url.hostname !== "127.0.0.1",
    (route) => {
      outside.push(route.request().url());
      return route.fulfill({ status: 200, contentType: "text/css", body: "" });
    },
  );
  return page;
}

/** From the dashboard's login page through the provider's login form (and consent, if asked). */
async function ssoLogin(page, server, provider, login) {
  await page.getByTestId("sso").click();
  await page.waitForURL(`${provider.issuer}/interaction/**`);
  await page.getByPlaceholder("Enter any login").fill(login);
  await page.getByPlaceholder("and password").fill("any-password");
  await page.getByRole("button", { name: "Sign-in" }).click();
  // The test provider grants consent itself; a consent page, if one comes, is confirmed.
  await waitFor("the way back to the dashboard", async () => {
    if (page.url().startsWith(server.origin)) return true;
    const consent = page.getByRole("button", { name: "Continue" });
    if (page.url().startsWith(provider.issuer) && (await consent.count()) === 1) await consent.click();
    return false;
  });
}

describe("single sign-on via an OpenID Connect provider", () => {
  let server, provider, browser, page, adminToken;
  const outside = [];

  before(async () => {
    // As the e2e tests do: the server first (its address is the redirect URI), then the provider,
    // then SSO switched on by editing argocd-cm while the server runs.
    server = await startServer({
      // As upstream, a group's rights come through `g` lines (a `p` line naming a group is not read).
      policy: ["g, admins, role:admin", "g, devs, role:dev", "p, role:dev, applications, get, */*, allow", "p, role:dev, projects, get, default, allow"],
    });
    provider = await startOidcProvider({ redirectUris: [`${server.origin}/auth/callback`] });
    server.reconfigure({
      cm: { url: server.origin, "oidc.config": oidcConfig(provider), "tiphys.personaltokens.enabled": "true" },
      secret: { "oidc.clientSecret": "argo-cd-secret" },
    });
    await waitFor("SSO settings in force", async () => {
      const settings = await (await fetch(`${server.url}api/v1/settings`)).json();
      return settings.oidcConfig?.issuer === provider.issuer && settings.url === server.origin;
    });
    adminToken = await token(server);
    await api(server, adminToken, "POST", "api/v1/applications", {
      metadata: { name: "guestbook" },
      spec: { destination: { server: "https://kubernetes.default.svc", namespace: "default" }, source: { repoURL: REPO, path: "guestbook" } },
    });
    browser = await launch();
    page = await ssoPage(browser, outside);
  });
  after(async () => {
    await browser?.close();
    await provider?.stop();
    await server?.stop();
  });

  it(`offers "Log in via ${IDP}" and logs in through the provider's form`, async () => {
    await page.goto(`${server.url}applications?search=guest`);
    await page.waitForURL(/\/login\?return_url=/);
    assert.equal(await page.getByTestId("sso").innerText(), `Log in via ${IDP}`);
    await shot(page, "50-sso-login");
    await page.getByTestId("sso").click();
    await page.waitForURL(`${provider.issuer}/interaction/**`);
    await page.getByPlaceholder("Enter any login").waitFor();
    await shot(page, "51-sso-provider-form");
    await page.goBack();
    await page.waitForURL(/\/login\?return_url=/);
    await ssoLogin(page, server, provider, "admin-sso");
    // Back on the return_url, logged in as the provider's user.
    await page.waitForURL(`${server.url}applications?search=guest`);
    await page.locator('[data-app="guestbook"]').waitFor();
    assert.equal(await page.getByTestId("current-user").innerText(), "admin-sso@example.test");
    assert.equal(await page.getByTestId("new-app").isDisabled(), false, "the admins group may create");
    await shot(page, "52-sso-applications");
  });

  it("shows the SSO user, the provider and the groups on the user info page", async () => {
    await page.getByRole("link", { name: "User info" }).click();
    await page.waitForURL(`${server.url}user-info`);
    await page.getByTestId("username").waitFor();
    // Username, issuer, groups.
    assert.deepEqual(await page.locator("dl.kv dd").allInnerTexts(), ["admin-sso@example.test", provider.issuer, "devs, admins"]);
    assert.equal(await page.getByRole("form", { name: "Change password" }).count(), 0, "no local password for an SSO user");
    const me = await page.evaluate(async () => (await fetch("api/v1/session/userinfo")).json());
    assert.deepEqual(me, { loggedIn: true, username: "admin-sso@example.test", iss: provider.issuer, groups: ["devs", "admins"] });
    await shot(page, "53-sso-user-info");
  });

  it("makes, shows once, lists and revokes a personal access token of the SSO user", async () => {
    // Still on the user info page; role:admin may update (and, through role:readonly, get) itself.
    await page.getByRole("heading", { name: "Personal access tokens" }).waitFor();
    await page.getByLabel("Token ID (optional)").fill("browser-1");
    await page.getByLabel("Description").fill("from the dashboard");
    await page.getByLabel("Expires in days (empty: never)").fill("1");
    await page.getByRole("button", { name: "Generate token" }).click();
    const shown = await page.getByTestId("new-token").inputValue();
    assert.match(shown, /^eyJ[\w-]+\.[\w-]+\.[\w-]+$/);
    const row = page.getByTestId("tokens").locator("tr", { hasText: "browser-1" });
    await row.getByText("from the dashboard").waitFor();
    await shot(page, "53b-sso-personal-token");
    await page.getByRole("button", { name: "Done" }).click();
    assert.ok(!(await page.content()).includes(shown));
    const bearer = { headers: { Authorization: `Bearer ${shown}` } };
    const me = await fetch(`${server.url}api/v1/session/userinfo`, bearer).then((r) => r.json());
    assert.deepEqual(me, { loggedIn: true, username: "admin-sso@example.test", iss: provider.issuer, groups: ["devs", "admins"] });
    await row.getByRole("button", { name: "Revoke" }).click();
    await row.waitFor({ state: "detached" });
    const revoked = await fetch(`${server.url}api/v1/account`, bearer);
    assert.equal(revoked.status, 401, "the revoked token is refused at once");
  });

  it("limits a user by the policy of their groups: actions are disabled", async () => {
    const dev = await ssoPage(browser, outside); // a browser of its own: no session here or at the provider
    try {
      await dev.goto(`${server.url}applications`);
      await dev.waitForURL(/\/login\?return_url=/);
      await ssoLogin(dev, server, provider, "dev-sso");
      await dev.waitForURL(`${server.url}applications`);
      await dev.locator('[data-app="guestbook"]').waitFor();
      assert.equal(await dev.getByTestId("current-user").innerText(), "dev-sso@example.test");
      assert.equal(await dev.getByTestId("new-app").isDisabled(), true, "cannot create");
      await dev.getByRole("link", { name: "guestbook" }).click();
      await dev.getByTestId("app-name").waitFor();
      await dev.locator('[data-testid="sync"][data-permitted="false"]').waitFor();
      assert.equal(await dev.getByTestId("sync").isDisabled(), true);
      assert.equal(await dev.getByTestId("delete").isDisabled(), true);
      assert.equal(await dev.getByTestId("delete").getAttribute("title"), "You are not permitted to do this");
      await shot(dev, "54-sso-rbac-details");
      await dev.getByRole("link", { name: "User info" }).click();
      await dev.getByTestId("username").waitFor();
      assert.deepEqual(await dev.locator("dl.kv dd").allInnerTexts(), ["dev-sso@example.test", provider.issuer, "devs"]);
      assert.deepEqual(dev.problems, [], "no console errors or uncaught exceptions");
    } finally {
      await dev.context().close();
    }
  });

  it("logs out at the provider's end-session page, then wants a login again", async () => {
    await page.goto(`${server.url}applications`);
    await page.locator('[data-app="guestbook"]').waitFor();
    const cookie = await sessionCookie(page, server);
    assert.match(cookie, /^argocd\.token=./);
    await page.getByTestId("logout").click();
    await page.waitForURL(`${provider.issuer}/session/end**`);
    const end = new URL(page.url());
    assert.equal(end.searchParams.get("post_logout_redirect_uri"), `${server.origin}/`);
    assert.ok(end.searchParams.get("id_token_hint"), "the provider is told whose session ends");
    await page.getByRole("button", { name: "Yes, sign me out" }).waitFor();
    await shot(page, "55-sso-provider-logout");
    assert.equal(await sessionCookie(page, server), "", "the browser's session cookie is gone");
    const me = await fetch(`${server.url}api/v1/session/userinfo`, { headers: { Cookie: cookie } }).then((r) => r.json());
    assert.ok(!me.loggedIn, "the old session cookie is dead on the server too");
    await page.getByRole("button", { name: "Yes, sign me out" }).click();
    await page.waitForURL(`${server.url}login**`);
    await page.getByTestId("sso").waitFor();
    await shot(page, "56-sso-logged-out");
    await page.goto(`${server.url}user-info`);
    await page.waitForURL(/\/login\?return_url=/);
    // The provider forgot the user too: its form is asked for again.
    await page.getByTestId("sso").click();
    await page.waitForURL(`${provider.issuer}/interaction/**`);
    await page.getByPlaceholder("Enter any login").waitFor();
    assert.deepEqual(page.problems, [], "no console errors or uncaught exceptions");
    // Only the provider's web font was asked for outside loopback (and answered here, empty).
    for (const url of outside) assert.match(url, /^https:\/\/fonts\.googleapis\.com\//, url);
  });
});

/** The `argocd.token` cookie the browser holds for the server (empty when there is none). */
async function sessionCookie(page, server) {
  const cookies = await page.context().cookies(server.url);
  return cookies.filter((c) => c.name === "argocd.token").map((c) => `${c.name}=${c.value}`).join("; ");
}
