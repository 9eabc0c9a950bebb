// Projects: list, create, delete.
import { useState } from "preact/hooks";
import { del, errorText, post, seg } from "../api/http";
import type { ListResponse, Project } from "../api/types";
import { useCan, useGet } from "../components/hooks";
import { Action, Confirm, ErrorBox, Field, Link, Loading } from "../components/ui";

export function Projects() {
  const list = useGet<ListResponse<Project>>("api/v1/projects");
  const canCreate = useCan("projects", "create", "*");
  const canDelete = useCan("projects", "delete", "*");
  const [name, setName] = useState("");
  const [description, setDescription] = useState("");
  const [error, setError] = useState<string>();
  const [deleting, setDeleting] = useState<string>();

  const create = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    try {
      await post("api/v1/projects", { project: { metadata: { name: name.trim() }, spec: { description: description || undefined } } });
      setName("");
      setDescription("");
      list.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };
  const remove = async (p: string) => {
    setDeleting(undefined);
    try {
      await del(`api/v1/projects/${seg(p)}`);
      list.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };

  return (
    <section>
      <h1>Projects</h1>
      <ErrorBox error={list.error ?? error} />
      {list.loading && !list.data ? (
        <Loading />
      ) : (
        <table class="table" data-testid="projects">
          <thead>
            <tr>
              <th>Name</th>
              <th>Description</th>
              <th>Destinations</th>
              <th>Sources</th>
              <th><span class="sr-only">Actions</span></th>
            </tr>
          </thead>
          <tbody>
            {(list.data?.items ?? []).map((p) => (
              <tr key={p.metadata.name}>
                <td><Link to={`settings/projects/${encodeURIComponent(p.metadata.name)}`}>{p.metadata.name}</Link></td>
                <td>{p.spec?.description || "–"}</td>
                <td>{p.spec?.destinations?.length ?? 0}</td>
                <td>{p.spec?.sourceRepos?.length ?? 0}</td>
                <td>
                  <Action allowed={canDelete} class="danger small" onClick={() => setDeleting(p.metadata.name)} aria-label={`Delete project ${p.metadata.name}`}>
                    Delete
                  </Action>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <form class="inline-form" onSubmit={create} aria-label="New project">
        <h2>New project</h2>
        <Field label="Name">
          <input name="name" required value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </Field>
        <Field label="Description">
          <input name="description" value={description} onInput={(e) => setDescription(e.currentTarget.value)} />
        </Field>
        <Action allowed={canCreate} type="submit" class="primary">
          Create project
        </Action>
      </form>
      {deleting && (
        <Confirm title="Delete project" message={`Delete project ${deleting}?`} confirmLabel="Delete" onCancel={() => setDeleting(undefined)} onConfirm={() => void remove(deleting)} />
      )}
    </section>
  );
}
