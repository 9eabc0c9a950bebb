// Repositories and repository credential templates: list, add, remove. Passwords and keys are
// write-only here: the server never returns them and the page never shows them.
import { useState } from "preact/hooks";
import { del, errorText, post, seg } from "../api/http";
import type { ListResponse, RepoCreds, Repository } from "../api/types";
import { useCan, useGet } from "../components/hooks";
import { Action, Badge, Confirm, ErrorBox, ExternalUrl, Field, Loading } from "../components/ui";

interface CredsForm {
  url: string;
  type: string;
  username: string;
  password: string;
  project: string;
}
const emptyForm = (): CredsForm => ({ url: "", type: "git", username: "", password: "", project: "" });

export function Repos() {
  const repos = useGet<ListResponse<Repository>>("api/v1/repositories");
  const creds = useGet<ListResponse<RepoCreds>>("api/v1/repocreds");
  const canCreate = useCan("repositories", "create", "*");
  const canDelete = useCan("repositories", "delete", "*");
  const [error, setError] = useState<string>();
  const [removing, setRemoving] = useState<{ kind: "repo" | "creds"; url: string }>();

  const add = async (kind: "repo" | "creds", f: CredsForm) => {
    setError(undefined);
    const common = { type: f.type, username: f.username || undefined, password: f.password || undefined };
    try {
      if (kind === "repo") await post("api/v1/repositories", { repo: f.url.trim(), project: f.project || undefined, ...common });
      else await post("api/v1/repocreds", { url: f.url.trim(), ...common });
      (kind === "repo" ? repos : creds).reload();
      return true;
    } catch (err) {
      setError(errorText(err));
      return false;
    }
  };
  const remove = async (r: { kind: "repo" | "creds"; url: string }) => {
    setRemoving(undefined);
    try {
      await del(`api/v1/${r.kind === "repo" ? "repositories" : "repocreds"}/${seg(r.url)}`);
      (r.kind === "repo" ? repos : creds).reload();
    } catch (err) {
      setError(errorText(err));
    }
  };

  return (
    <section>
      <h1>Repositories</h1>
      <ErrorBox error={repos.error ?? error} />
      {repos.loading && !repos.data ? (
        <Loading />
      ) : (
        <table class="table" data-testid="repos">
          <thead>
            <tr>
              <th>Repository</th>
              <th>Type</th>
              <th>Project</th>
              <th>Connection</th>
              <th><span class="sr-only">Actions</span></th>
            </tr>
          </thead>
          <tbody>
            {(repos.data?.items ?? []).map((r) => (
              <tr key={r.repo}>
                <td><ExternalUrl url={r.repo} /></td>
                <td>{r.type || "git"}</td>
                <td>{r.project || "–"}</td>
                <td><Badge kind="conn" value={r.connectionState?.status} /></td>
                <td>
                  <Action allowed={canDelete} class="danger small" onClick={() => setRemoving({ kind: "repo", url: r.repo })} aria-label={`Remove repository ${r.repo}`}>
                    Remove
                  </Action>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <CredsFormView title="Add repository" urlLabel="Repository URL" withProject allowed={canCreate} onSubmit={(f) => add("repo", f)} />

      <h2>Credential templates</h2>
      <ErrorBox error={creds.error} />
      <table class="table" data-testid="repocreds">
        <thead>
          <tr>
            <th>URL prefix</th>
            <th>Type</th>
            <th>Username</th>
            <th><span class="sr-only">Actions</span></th>
          </tr>
        </thead>
        <tbody>
          {(creds.data?.items ?? []).map((c) => (
            <tr key={c.url}>
              <td class="mono">{c.url}</td>
              <td>{c.type || "git"}</td>
              <td>{c.username || "–"}</td>
              <td>
                <Action allowed={canDelete} class="danger small" onClick={() => setRemoving({ kind: "creds", url: c.url })} aria-label={`Remove credentials ${c.url}`}>
                  Remove
                </Action>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <CredsFormView title="Add credential template" urlLabel="URL prefix" allowed={canCreate} onSubmit={(f) => add("creds", f)} />
      {removing && (
        <Confirm title="Remove" message={`Remove ${removing.url}?`} confirmLabel="Remove" onCancel={() => setRemoving(undefined)} onConfirm={() => void remove(removing)} />
      )}
    </section>
  );
}

function CredsFormView(props: { title: string; urlLabel: string; withProject?: boolean; allowed: boolean | undefined; onSubmit: (f: CredsForm) => Promise<boolean> }) {
  const [f, setF] = useState(emptyForm);
  return (
    <form
      class="inline-form"
      aria-label={props.title}
      onSubmit={async (e) => {
        e.preventDefault();
        if (await props.onSubmit(f)) setF(emptyForm());
      }}
    >
      <h2>{props.title}</h2>
      <Field label={props.urlLabel}>
        <input name="url" required value={f.url} onInput={(e) => setF({ ...f, url: e.currentTarget.value })} />
      </Field>
      <Field label="Type">
        <select value={f.type} onChange={(e) => setF({ ...f, type: e.currentTarget.value })}>
          <option value="git">git</option>
          <option value="helm">helm</option>
          <option value="oci">oci</option>
        </select>
      </Field>
      {props.withProject && (
        <Field label="Project">
          <input value={f.project} onInput={(e) => setF({ ...f, project: e.currentTarget.value })} />
        </Field>
      )}
      <Field label="Username">
        <input autoComplete="off" value={f.username} onInput={(e) => setF({ ...f, username: e.currentTarget.value })} />
      </Field>
      <Field label="Password" hint="Stored by the server; never shown again.">
        <input type="password" autoComplete="new-password" value={f.password} onInput={(e) => setF({ ...f, password: e.currentTarget.value })} />
      </Field>
      <Action allowed={props.allowed} type="submit" class="primary">
        {props.title}
      </Action>
    </form>
  );
}
