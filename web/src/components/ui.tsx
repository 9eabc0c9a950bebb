// Small building blocks shared by the pages. Values are always rendered as text (JSX escapes);
// nothing here sets innerHTML.
import { Fragment, type ButtonHTMLAttributes, type ComponentChildren } from "preact";
import { useEffect, useRef } from "preact/hooks";
import { href } from "../router";
import { safeHref } from "../lib/url";

export function Link(props: { to: string; children: ComponentChildren; class?: string; "aria-current"?: "page" }) {
  return (
    <a href={href(props.to)} class={props.class} aria-current={props["aria-current"]}>
      {props.children}
    </a>
  );
}

/** A URL from data: a link only when it is http(s), otherwise plain text (SEC-25). */
export function ExternalUrl({ url }: { url?: string }) {
  if (!url) return <span class="muted">–</span>;
  const safe = safeHref(url);
  if (!safe) return <span class="mono">{url}</span>;
  return (
    <a class="mono" href={safe} target="_blank" rel="noopener noreferrer" data-external>
      {url}
    </a>
  );
}

export function ErrorBox({ error }: { error?: string }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {error}
    </p>
  );
}

export function Loading() {
  return <p class="muted" aria-busy="true">Loading…</p>;
}

export function Badge({ value, kind }: { value?: string; kind: "sync" | "health" | "phase" | "conn" }) {
  const v = value || "Unknown";
  const what = { sync: "Sync status", health: "Health", phase: "Phase", conn: "Connection" }[kind];
  return (
    <span class={`badge ${kind}-${v.toLowerCase()}`} title={`${what}: ${v}`} data-kind={kind}>
      {v}
    </span>
  );
}

export function Time({ value }: { value?: string | number | null }) {
  if (value === undefined || value === null || value === "") return <span class="muted">–</span>;
  const d = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  if (Number.isNaN(d.getTime())) return <span>{String(value)}</span>;
  return <time dateTime={d.toISOString()} title={d.toISOString()}>{d.toLocaleString()}</time>;
}

/** A button that is disabled until `allowed` is true (can-i), saying why when it is not. */
export function Action(
  props: { allowed: boolean | undefined; reason?: string; children: ComponentChildren } & ButtonHTMLAttributes<HTMLButtonElement>,
) {
  const { allowed, reason, children, ...rest } = props;
  const denied = allowed === false;
  return (
    <button
      type="button"
      {...rest}
      disabled={allowed !== true || Boolean(rest.disabled)}
      title={denied ? reason || "You are not permitted to do this" : (rest.title as string | undefined)}
      data-permitted={allowed === undefined ? "pending" : String(allowed)}
    >
      {children}
    </button>
  );
}

/** A modal dialog (native <dialog>: focus trapping and Escape come with it). */
export function Modal(props: { title: string; onClose: () => void; children: ComponentChildren }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
  }, []);
  return (
    <dialog ref={ref} class="modal" aria-label={props.title} onClose={props.onClose}>
      <h2>{props.title}</h2>
      {props.children}
    </dialog>
  );
}

/** Asks before something irreversible. */
export function Confirm(props: {
  title: string;
  message: ComponentChildren;
  confirmLabel: string;
  onConfirm: () => void;
  onCancel: () => void;
  /** The confirm button stays disabled while false (e.g. until the name is typed). */
  ready?: boolean;
}) {
  return (
    <Modal title={props.title} onClose={props.onCancel}>
      <div class="stack">{props.message}</div>
      <div class="row end">
        <button type="button" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="button" class="danger" disabled={props.ready === false} onClick={props.onConfirm} data-testid="confirm">
          {props.confirmLabel}
        </button>
      </div>
    </Modal>
  );
}

export function KeyValues({ rows }: { rows: Array<[string, ComponentChildren]> }) {
  return (
    <dl class="kv">
      {rows.map(([k, v]) => (
        <Fragment key={k}>
          <dt>{k}</dt>
          <dd>{v}</dd>
        </Fragment>
      ))}
    </dl>
  );
}

export function Field(props: { label: string; children: ComponentChildren; hint?: string }) {
  return (
    <label class="field">
      <span>{props.label}</span>
      {props.children}
      {props.hint && <small class="muted">{props.hint}</small>}
    </label>
  );
}

/** A secret that was just created (a token): shown once, with a copy button. */
export function ShownOnce({ label, value, onDone }: { label: string; value: string; onDone: () => void }) {
  return (
    <div class="notice" role="status">
      <p>
        <strong>{label}</strong> It is shown only this once: copy it now.
      </p>
      <textarea readOnly rows={3} class="mono" data-testid="new-token" value={value} />
      <div class="row">
        <button type="button" onClick={() => void navigator.clipboard?.writeText(value)}>
          Copy
        </button>
        <button type="button" onClick={onDone}>
          Done
        </button>
      </div>
    </div>
  );
}
