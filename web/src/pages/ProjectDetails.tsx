// One project: its destinations, source repositories and roles, each editable, and role tokens
// (a new token is shown once and never again).
import { useState } from "preact/hooks";
import { del, errorText, post, put, seg } from "../api/http";
import type { Destination, Project, ProjectRole } from "../api/types";
import { useCan, useGet } from "../components/hooks";
import { Action, ErrorBox, Field, Link, Loading, ShownOnce, Time } from "../components/ui";

export function ProjectDetails({ name }: { name: string }) {
  const detail = useGet<{ project?: Project }>(`api/v1/projects/${seg(name)}/detailed`);
  const canUpdate = useCan("projects", "update", name);
  const [error, setError] = useState<string>();
  const [token, setToken] = useState<string>();
  const project = detail.data?.project;

  const save = async (change: (p: Project) => void) => {
    if (!project) return;
    setError(undefined);
    const next: Project = JSON.parse(JSON.stringify(project));
    next.spec = next.spec ?? {};
    change(next);
    try {
      await put(`api/v1/projects/${seg(name)}`, { project: next });
      detail.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };

  if (detail.error) return <section><h1>{name}</h1><ErrorBox error={detail.error} /></section>;
  if (!project) return <Loading />;
  const spec = project.spec ?? {};

  return (
    <section>
      <nav aria-label="Breadcrumb" class="muted">
        <Link to="settings/projects">Projects</Link> /
      </nav>
      <h1 data-testid="project-name">{project.metadata.name}</h1>
      <p>{spec.description}</p>
      <ErrorBox error={error} />
      {token && <ShownOnce label="New role token." value={token} onDone={() => setToken(undefined)} />}

      <h2>Destinations</h2>
      <ListEditor<Destination>
        items={spec.destinations ?? []}
        columns={["Server", "Name", "Namespace"]}
        cells={(d) => [d.server ?? "–", d.name ?? "–", d.namespace ?? "–"]}
        allowed={canUpdate}
        fields={["server", "name", "namespace"]}
        onAdd={(v) => save((p) => (p.spec!.destinations = [...(p.spec!.destinations ?? []), clean(v)]))}
        onRemove={(i) => save((p) => p.spec!.destinations!.splice(i, 1))}
        what="destination"
      />

      <h2>Source repositories</h2>
      <ListEditor<string>
        items={spec.sourceRepos ?? []}
        columns={["Repository"]}
        cells={(r) => [r]}
        allowed={canUpdate}
        fields={["repository"]}
        onAdd={(v) => save((p) => (p.spec!.sourceRepos = [...(p.spec!.sourceRepos ?? []), v.repository]))}
        onRemove={(i) => save((p) => p.spec!.sourceRepos!.splice(i, 1))}
        what="source repository"
      />

      <h2>Roles</h2>
      <Roles project={project} allowed={canUpdate} onSave={save} onToken={setToken} onError={setError} reload={detail.reload} />
    </section>
  );
}

function clean(v: Record<string, string>): Destination {
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(v)) if (x.trim()) out[k] = x.trim();
  return out;
}

function ListEditor<T>(props: {
  items: T[];
  columns: string[];
  cells: (t: T) => string[];
  allowed: boolean | undefined;
  fields: string[];
  onAdd: (values: Record<string, string>) => void;
  onRemove: (index: number) => void;
  what: string;
}) {
  const empty = Object.fromEntries(props.fields.map((f) => [f, ""]));
  const [values, setValues] = useState<Record<string, string>>(empty);
  return (
    <>
      <table class="table">
        <thead>
          <tr>
            {props.columns.map((c) => <th key={c}>{c}</th>)}
            <th><span class="sr-only">Actions</span></th>
          </tr>
        </thead>
        <tbody>
          {props.items.length === 0 && (
            <tr>
              <td colSpan={props.columns.length + 1} class="muted">None.</td>
            </tr>
          )}
          {props.items.map((item, i) => (
            <tr key={i}>
              {props.cells(item).map((c, j) => <td key={j} class="mono">{c}</td>)}
              <td>
                <Action allowed={props.allowed} class="small" onClick={() => props.onRemove(i)} aria-label={`Remove ${props.what} ${props.cells(item)[0]}`}>
                  Remove
                </Action>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <form
        class="row wrap"
        aria-label={`Add ${props.what}`}
        onSubmit={(e) => {
          e.preventDefault();
          props.onAdd(values);
          setValues(empty);
        }}
      >
        {props.fields.map((f) => (
          <input key={f} aria-label={`${props.what} ${f}`} placeholder={f} value={values[f]} onInput={(e) => setValues({ ...values, [f]: e.currentTarget.value })} />
        ))}
        <Action allowed={props.allowed} type="submit">
          Add {props.what}
        </Action>
      </form>
    </>
  );
}

function Roles(props: {
  project: Project;
  allowed: boolean | undefined;
  onSave: (change: (p: Project) => void) => Promise<void>;
  onToken: (t: string) => void;
  onError: (e: string) => void;
  reload: () => void;
}) {
  const name = props.project.metadata.name;
  const roles = props.project.spec?.roles ?? [];
  const [role, setRole] = useState({ name: "", description: "", policy: "" });
  const addRole = (e: Event) => {
    e.preventDefault();
    const r: ProjectRole = { name: role.name.trim(), description: role.description || undefined };
    if (role.policy.trim()) r.policies = [role.policy.trim()];
    void props.onSave((p) => (p.spec!.roles = [...(p.spec!.roles ?? []), r]));
    setRole({ name: "", description: "", policy: "" });
  };
  const createToken = async (r: string) => {
    try {
      const res = await post<{ token?: string }>(`api/v1/projects/${seg(name)}/roles/${seg(r)}/token`, { project: name, role: r });
      if (res.token) props.onToken(res.token);
      props.reload();
    } catch (err) {
      props.onError(errorText(err));
    }
  };
  const deleteToken = async (r: string, iat: number, id?: string) => {
    try {
      await del(`api/v1/projects/${seg(name)}/roles/${seg(r)}/token/${iat}${id ? `?id=${encodeURIComponent(id)}` : ""}`);
      props.reload();
    } catch (err) {
      props.onError(errorText(err));
    }
  };
  return (
    <>
      {roles.length === 0 && <p class="muted">No roles.</p>}
      {roles.map((r, i) => (
        <article class="panel" key={r.name} data-role={r.name}>
          <h3>{r.name}</h3>
          <p>{r.description}</p>
          <h4>Policies</h4>
          <ul class="mono">{(r.policies ?? []).map((p) => <li key={p}>{p}</li>)}</ul>
          {r.groups?.length ? <p>Groups: {r.groups.join(", ")}</p> : null}
          <h4>Tokens</h4>
          <table class="table">
            <thead>
              <tr>
                <th>ID</th>
                <th>Issued</th>
                <th>Expires</th>
                <th><span class="sr-only">Actions</span></th>
              </tr>
            </thead>
            <tbody>
              {(r.jwtTokens ?? []).map((t) => (
                <tr key={t.iat}>
                  <td class="mono">{t.id ?? "–"}</td>
                  <td><Time value={t.iat} /></td>
                  <td>{t.exp ? <Time value={t.exp} /> : "never"}</td>
                  <td>
                    <Action allowed={props.allowed} class="small" onClick={() => void deleteToken(r.name, t.iat, t.id)}>
                      Revoke
                    </Action>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <div class="row">
            <Action allowed={props.allowed} onClick={() => void createToken(r.name)} data-testid={`token-${r.name}`}>
              Create token
            </Action>
            <Action allowed={props.allowed} class="danger" onClick={() => void props.onSave((p) => p.spec!.roles!.splice(i, 1))}>
              Delete role
            </Action>
          </div>
        </article>
      ))}
      <form class="inline-form" onSubmit={addRole} aria-label="New role">
        <h3>New role</h3>
        <Field label="Role name">
          <input name="role" required value={role.name} onInput={(e) => setRole({ ...role, name: e.currentTarget.value })} />
        </Field>
        <Field label="Description">
          <input value={role.description} onInput={(e) => setRole({ ...role, description: e.currentTarget.value })} />
        </Field>
        <Field label="Policy" hint={`e.g. p, proj:${name}:ROLE, applications, get, ${name}/*, allow`}>
          <input value={role.policy} onInput={(e) => setRole({ ...role, policy: e.currentTarget.value })} />
        </Field>
        <Action allowed={props.allowed} type="submit">
          Add role
        </Action>
      </form>
    </>
  );
}
