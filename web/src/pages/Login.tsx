// The login page: username/password against POST api/v1/session (the server sets the session
// cookie), an SSO button for each OIDC provider the server offers, and a same-origin return_url.
import { useState } from "preact/hooks";
import { ApiError, apiUrl, post } from "../api/http";
import type { Settings } from "../api/types";
import { safeReturnUrl } from "../lib/url";

/** Fixed messages: the server's wording is not shown, and nothing says which field was wrong. */
export function loginErrorMessage(status: number): string {
  if (status === 401 || status === 403) return "Invalid username or password.";
  if (status === 429) return "Too many login attempts. Wait a few minutes and try again.";
  return "Login failed. Try again later.";
}

export function ssoName(settings: Settings): string | undefined {
  if (settings.oidcConfig) return settings.oidcConfig.name || "SSO";
  const connectors = settings.dexConfig?.connectors;
  if (connectors && connectors.length > 0) return connectors[0].name || "SSO";
  return undefined;
}

/** One SSO button: its label and the `/auth/login` query (`provider` when one of several). */
export interface SsoButton {
  label: string;
  query: string;
}

/** A button per provider when the server lists several (`ssoProviders`, tiphys's field 1000),
 * else the one button upstream's settings allow for. */
export function ssoButtons(settings: Settings, returnUrl: string): SsoButton[] {
  const back = `return_url=${encodeURIComponent(returnUrl)}`;
  const listed = (settings.ssoProviders ?? []).filter((p) => p.name);
  if (listed.length > 0) {
    return listed.map((p) => ({
      label: p.name === "default" ? settings.oidcConfig?.name || "SSO" : (p.name as string),
      query: `provider=${encodeURIComponent(p.name as string)}&${back}`,
    }));
  }
  const name = ssoName(settings);
  return name === undefined ? [] : [{ label: name, query: back }];
}

export function Login(props: { settings: Settings; returnUrl: string | null; onLoggedIn: (to: string) => void }) {
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const target = safeReturnUrl(props.returnUrl, document.baseURI) ?? new URL("applications", document.baseURI).toString();
  const sso = ssoButtons(props.settings, target);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await post("api/v1/session", { username, password });
      props.onLoggedIn(target);
    } catch (err) {
      setError(loginErrorMessage(err instanceof ApiError ? err.status : 0));
      setBusy(false);
    }
  };

  return (
    <main id="content" class="login">
      <h1 class="brand">tiphys</h1>
      {sso.map((b) => (
        <p key={b.query}>
          <a class="button primary" href={`${apiUrl("auth/login")}?${b.query}`} data-testid="sso">
            Log in via {b.label}
          </a>
        </p>
      ))}
      {!props.settings.userLoginsDisabled && (
        <form onSubmit={submit} aria-label="Log in">
          <label class="field">
            <span>Username</span>
            <input name="username" autoComplete="username" required value={username} onInput={(e) => setUsername(e.currentTarget.value)} />
          </label>
          <label class="field">
            <span>Password</span>
            <input
              name="password"
              type="password"
              autoComplete="current-password"
              required
              value={password}
              onInput={(e) => setPassword(e.currentTarget.value)}
            />
          </label>
          {error && (
            <p class="error" role="alert">
              {error}
            </p>
          )}
          <button type="submit" class="primary" disabled={busy}>
            Log in
          </button>
        </form>
      )}
    </main>
  );
}
