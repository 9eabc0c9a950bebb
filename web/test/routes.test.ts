import { test } from "node:test";
import assert from "node:assert/strict";
import { matchRoute, pagePath } from "../src/lib/routes";
import { loginErrorMessage, ssoButtons, ssoName } from "../src/pages/Login";
import { appFromForm } from "../src/pages/AppCreate";

test("routes", () => {
  assert.deepEqual(matchRoute(""), { page: "apps" });
  assert.deepEqual(matchRoute("applications"), { page: "apps" });
  assert.deepEqual(matchRoute("applications/new"), { page: "app-new" });
  assert.deepEqual(matchRoute("applications/argocd/guest%2Fbook"), { page: "app", namespace: "argocd", name: "guest/book", tab: "summary" });
  assert.deepEqual(matchRoute("applications/argocd/guestbook/yaml"), { page: "app", namespace: "argocd", name: "guestbook", tab: "yaml" });
  assert.deepEqual(matchRoute("settings/projects/default"), { page: "project", name: "default" });
  assert.deepEqual(matchRoute("login"), { page: "login" });
  assert.equal(matchRoute("nope/x").page, "not-found");
  // A malformed escape does not throw: the segment is kept as typed.
  assert.equal(matchRoute("settings/projects/%E0%A4%A").page, "project");
  assert.equal(pagePath("argocd", "a/b"), "argocd/a%2Fb");
});

test("login errors are fixed texts that do not say which field was wrong", () => {
  assert.equal(loginErrorMessage(401), "Invalid username or password.");
  assert.match(loginErrorMessage(429), /Too many/);
  assert.equal(loginErrorMessage(500), "Login failed. Try again later.");
});

test("the SSO button appears only when the server has a provider", () => {
  assert.equal(ssoName({}), undefined);
  assert.equal(ssoName({ oidcConfig: { name: "Okta" } }), "Okta");
  assert.equal(ssoName({ oidcConfig: {} }), "SSO");
  assert.equal(ssoName({ dexConfig: { connectors: [{ name: "GitHub" }] } }), "GitHub");
  assert.equal(ssoName({ dexConfig: { connectors: [] } }), undefined);
});

test("one SSO button per provider the server lists, each naming its provider", () => {
  const back = "/applications?a=1";
  assert.deepEqual(ssoButtons({}, back), []);
  assert.deepEqual(ssoButtons({ oidcConfig: { name: "Okta" } }, back), [
    { label: "Okta", query: "return_url=%2Fapplications%3Fa%3D1" },
  ]);
  const several = { oidcConfig: { name: "Corp" }, ssoProviders: [{ name: "default" }, { name: "partners" }, {}] };
  assert.deepEqual(ssoButtons(several, back), [
    { label: "Corp", query: "provider=default&return_url=%2Fapplications%3Fa%3D1" },
    { label: "partners", query: "provider=partners&return_url=%2Fapplications%3Fa%3D1" },
  ]);
});

test("the create form builds an Application", () => {
  const app = appFromForm({
    name: " web ",
    project: "",
    repoURL: "https://git.test/r.git",
    path: "guestbook",
    targetRevision: "",
    server: "https://kubernetes.default.svc",
    namespace: "prod",
    automated: true,
    labels: "team=a, env=prod=x,",
  });
  assert.deepEqual(app, {
    metadata: { name: "web", labels: { team: "a", env: "prod=x" } },
    spec: {
      project: "default",
      source: { repoURL: "https://git.test/r.git", path: "guestbook", targetRevision: "HEAD" },
      destination: { server: "https://kubernetes.default.svc", namespace: "prod" },
      syncPolicy: { automated: { prune: false, selfHeal: false } },
    },
  });
});
