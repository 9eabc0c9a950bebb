// Who am I, my groups, change my password, my API tokens (a new token is shown once); for a
// single sign-on user, their personal access tokens (the same calls, with a description).
import { useState } from "preact/hooks";
import { del, errorText, post, put, seg } from "../api/http";
import type { Account } from "../api/types";
import { useGet } from "../components/hooks";
import { ErrorBox, Field, KeyValues, ShownOnce, Time } from "../components/ui";
import { useSession } from "../session";

export function AccountPage() {
  const { user } = useSession();
  const local = user.iss === "argocd";
  // An SSO user's own account view holds their personal access tokens.
  const account = useGet<Account>(user.username ? `api/v1/account/${seg(user.username)}` : undefined);
  const [error, setError] = useState<string>();
  const [notice, setNotice] = useState<string>();
  const [token, setToken] = useState<string>();
  const [pw, setPw] = useState({ current: "", next: "", again: "" });
  const [tokenName, setTokenName] = useState("");
  const [expires, setExpires] = useState("");
  const [description, setDescription] = useState("");

  const changePassword = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    setNotice(undefined);
    if (pw.next !== pw.again) return setError("The new passwords do not match.");
    try {
      await put("api/v1/account/password", { name: user.username, currentPassword: pw.current, newPassword: pw.next });
      setPw({ current: "", next: "", again: "" });
      setNotice("Password changed.");
    } catch (err) {
      setError(errorText(err));
    }
  };
  const createToken = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    try {
      const seconds = expires ? Math.round(Number(expires) * 86400) : 0;
      const res = await post<{ token?: string }>(`api/v1/account/${seg(user.username ?? "")}/token`, {
        name: user.username,
        id: tokenName || undefined,
        expiresIn: seconds || undefined,
        description: (!local && description) || undefined,
      });
      if (res.token) setToken(res.token);
      setTokenName("");
      setDescription("");
      account.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };
  const deleteToken = async (id: string) => {
    try {
      await del(`api/v1/account/${seg(user.username ?? "")}/token/${seg(id)}`);
      account.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };

  const canTokens = account.data?.capabilities?.includes("apiKey");
  return (
    <section class="narrow">
      <h1>User info</h1>
      <KeyValues
        rows={[
          ["Username", <span data-testid="username">{user.username}</span>],
          ["Issuer", user.iss ?? "–"],
          ["Groups", user.groups?.length ? user.groups.join(", ") : "–"],
        ]}
      />
      {notice && <p class="notice" role="status">{notice}</p>}
      <ErrorBox error={error} />
      {local && (
        <form class="inline-form" onSubmit={changePassword} aria-label="Change password">
          <h2>Change password</h2>
          <Field label="Current password">
            <input type="password" autoComplete="current-password" required value={pw.current} onInput={(e) => setPw({ ...pw, current: e.currentTarget.value })} />
          </Field>
          <Field label="New password">
            <input type="password" autoComplete="new-password" required value={pw.next} onInput={(e) => setPw({ ...pw, next: e.currentTarget.value })} />
          </Field>
          <Field label="New password again">
            <input type="password" autoComplete="new-password" required value={pw.again} onInput={(e) => setPw({ ...pw, again: e.currentTarget.value })} />
          </Field>
          <button type="submit" class="primary">
            Change password
          </button>
        </form>
      )}
      {(local || account.data) && (
        <>
          <h2>{local ? "API tokens" : "Personal access tokens"}</h2>
          {token && <ShownOnce label={local ? "New API token." : "New personal access token."} value={token} onDone={() => setToken(undefined)} />}
          <ErrorBox error={account.error} />
          {!canTokens && account.data && <p class="muted">This account cannot have API tokens (it lacks the apiKey capability).</p>}
          <table class="table" data-testid="tokens">
            <thead>
              <tr>
                <th>ID</th>
                <th>Issued</th>
                <th>Expires</th>
                {!local && <th>Description</th>}
                <th><span class="sr-only">Actions</span></th>
              </tr>
            </thead>
            <tbody>
              {(account.data?.tokens ?? []).map((t) => (
                <tr key={t.id}>
                  <td class="mono">{t.id}</td>
                  <td><Time value={t.issuedAt} /></td>
                  <td>{t.expiresAt ? <Time value={t.expiresAt} /> : "never"}</td>
                  {!local && <td>{t.description ?? ""}</td>}
                  <td>
                    <button type="button" class="small" onClick={() => t.id && void deleteToken(t.id)}>
                      Revoke
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {canTokens && (
            <form class="row wrap" onSubmit={createToken} aria-label="New API token">
              <input aria-label="Token ID (optional)" placeholder="id (optional)" value={tokenName} onInput={(e) => setTokenName(e.currentTarget.value)} />
              {!local && (
                <input aria-label="Description" placeholder="what it is for" maxLength={256} value={description} onInput={(e) => setDescription(e.currentTarget.value)} />
              )}
              <input aria-label="Expires in days (empty: never)" placeholder="expires in days" inputMode="numeric" value={expires} onInput={(e) => setExpires(e.currentTarget.value)} />
              <button type="submit">Generate token</button>
            </form>
          )}
        </>
      )}
    </section>
  );
}
