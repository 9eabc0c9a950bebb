// Deleting an application: type its name, choose foreground, background or non-cascading
// (behaviour as upstream's deleteApplication in applications/components/utils.tsx).
import { useState } from "preact/hooks";
import type { PropagationPolicy } from "../lib/actions";
import { Confirm } from "./ui";

const POLICIES: Array<[PropagationPolicy, string, string]> = [
  ["foreground", "Foreground", "Delete the application's resources, then the application (foreground propagation)."],
  ["background", "Background", "Delete the application now and its resources in the background (background propagation)."],
  ["non-cascading", "Non-cascading", "Delete only the application; its resources stay in the cluster."],
];

export function DeleteAppDialog(props: { name: string; onCancel: () => void; onDelete: (policy: PropagationPolicy) => void }) {
  const [policy, setPolicy] = useState<PropagationPolicy>("foreground");
  const [typed, setTyped] = useState("");
  return (
    <Confirm
      title="Delete application"
      confirmLabel="Delete"
      ready={typed === props.name}
      onCancel={props.onCancel}
      onConfirm={() => props.onDelete(policy)}
      message={
        <>
          <p>
            Delete the application <strong>{props.name}</strong>? Foreground and background deletion also delete every resource it manages.
          </p>
          <label class="field">
            <span>Type the application's name to confirm</span>
            <input value={typed} onInput={(e) => setTyped(e.currentTarget.value)} data-testid="delete-name" autocomplete="off" />
          </label>
          <fieldset class="stack">
            <legend>Propagation policy</legend>
            {POLICIES.map(([value, label, help]) => (
              <label class="check" key={value}>
                <input type="radio" name="propagation" value={value} checked={policy === value} onChange={() => setPolicy(value)} data-testid={`delete-${value}`} />
                <span>
                  <strong>{label}</strong> <small class="muted">{help}</small>
                </span>
              </label>
            ))}
          </fieldset>
        </>
      }
    />
  );
}
